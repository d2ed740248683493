package dest

// UnsupportedTypes names the Arrow types ducksql.Type has no DuckDB column for: unions and run-end encoding.
// The engine refuses a pipeline that would send one, at start (serve.TypeLimits).
func (d *Destination) UnsupportedTypes() []string {
	return []string{"dense_union", "sparse_union", "run_end_encoded"}
}
