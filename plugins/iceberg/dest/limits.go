package dest

// UnsupportedTypes names the Arrow types an Iceberg table cannot hold even after icebergCompatible (which
// maps intervals, unsigned integers, date64 and time32): Iceberg decimals stop at precision 38, and it has
// no duration, no month or day-time interval, no union, and iceberg-go takes no view layouts. The engine
// refuses a pipeline that would send one, at start (serve.TypeLimits).
func (d *Destination) UnsupportedTypes() []string {
	return []string{"decimal256", "duration", "month_interval", "day_time_interval", "dense_union", "sparse_union", "string_view", "binary_view"}
}
