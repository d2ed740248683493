package dest

// UnsupportedTypes names the Arrow types typemap.ColumnType has no PostgreSQL column for: unions, run-end
// encoding and the list views. The engine refuses a pipeline that would send one, at start (serve.TypeLimits).
func (d *Destination) UnsupportedTypes() []string {
	return []string{"dense_union", "sparse_union", "run_end_encoded", "list_view", "large_list_view"}
}
