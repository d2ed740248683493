package dblog

// KeptRuns calls emit(start, end) for each maximal run [start, end) of rows in a chunk whose key is not in
// changed, in order, and returns how many rows the runs hold. keys[i] is row i's key. Runs let a source send
// slices of the chunk's record instead of copying the kept rows.
func KeptRuns[K comparable](keys []K, changed map[K]bool, emit func(start, end int) error) (int64, error) {
	var kept int64
	start := -1
	for i, k := range keys {
		if !changed[k] {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			if err := emit(start, i); err != nil {
				return kept, err
			}
			kept += int64(i - start)
			start = -1
		}
	}
	if start >= 0 {
		if err := emit(start, len(keys)); err != nil {
			return kept, err
		}
		kept += int64(len(keys) - start)
	}
	return kept, nil
}
