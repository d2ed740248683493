package dest

// UnsupportedTypes names the Arrow types sfsql.Of has no Snowflake column for: decimals other than
// decimal128 (NUMBER stops at 38 digits, and arrow-go's decimal32/64 have no Parquet path here), date64,
// durations and intervals (Snowflake has neither), unions, list views and run-end encoding. The engine refuses
// a pipeline that would send one, at start (serve.TypeLimits), rather than stopping the apply with a DataErr.
// It counts at any depth, which is stricter than sfsql.Of for a field inside a struct or list (that one
// becomes JSON text in an OBJECT or ARRAY); a refused pipeline is clearer than a value in a form nobody chose.
func (d *Destination) UnsupportedTypes() []string {
	return []string{"decimal32", "decimal64", "decimal256", "date64", "duration", "month_interval", "day_time_interval",
		"month_day_nano_interval", "dense_union", "sparse_union", "list_view", "large_list_view", "run_end_encoded"}
}
