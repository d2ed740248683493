package dest

// UnsupportedTypes names the Arrow types the plugin refuses (rows.NewEncoder): unions and run-end encoding,
// whose text form is not their value. Every other type has a column, native or as text or JSON (README.md).
// The engine refuses a pipeline that would send one, at start (serve.TypeLimits), rather than stopping an
// apply with a DataErr.
func (d *Destination) UnsupportedTypes() []string {
	return []string{"dense_union", "sparse_union", "run_end_encoded"}
}
