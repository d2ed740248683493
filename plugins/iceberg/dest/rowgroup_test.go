package dest

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// One apply of 2×RowGroupRows+1 rows writes data files whose row groups hold at most RowGroupRows rows, and so
// does the compaction that rewrites them: a point lookup through `skippr serve` prunes by row-group statistics,
// and with iceberg-go's default (1,048,576 rows) every file of a coalesced apply, or of a compaction, was one
// row group, decoded whole to find one row.
func TestDataFilesKeepRowGroupsSmall(t *testing.T) {
	e := newEnv(t, nil)
	sc := eventsSchema()
	const n = 2*RowGroupRows + 1
	rows := make([]row, 0, n)
	for id := 1; id <= n; id++ {
		rows = append(rows, r(opI, id, nil, "eu", id))
	}
	e.apply(1, append([]serve.Item{schemaItem("events", sc)}, items("events", batch(t, sc, rows...))...)...)
	checkRowGroups(t, e, n)
	// An update leaves an equality delete over the big file, which compaction folds in by rewriting it.
	e.apply(2, items("events", batch(t, sc, r(opU, 7, nil, "us", 70)))...)
	res, err := Compact(ctxT(t), e.raw, "events", CompactOptions{ExpireOlderThan: -1, OrphansOlderThan: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.RemovedDataFiles == 0 {
		t.Fatalf("compaction rewrote no data file: %+v", res)
	}
	checkRowGroups(t, e, n)
	e.check("events", "events", "id")
}

// checkRowGroups fails unless the table's live data files hold n rows in at least 3 row groups, none of them
// above RowGroupRows.
func checkRowGroups(t *testing.T, e *env, n int64) {
	t.Helper()
	var groups, total int64
	data, _ := tableFiles(t, e.table("events"))
	for _, f := range data {
		rd, err := file.OpenParquetFile(strings.TrimPrefix(f, "file://"), false)
		if err != nil {
			t.Fatal(err)
		}
		for i := range rd.NumRowGroups() {
			m := rd.MetaData().RowGroup(i)
			if m.NumRows() > RowGroupRows {
				t.Errorf("%s: row group %d holds %d rows, above RowGroupRows %d", f, i, m.NumRows(), RowGroupRows)
			}
			groups++
			total += m.NumRows()
		}
		rd.Close()
	}
	if total != n || groups < 3 {
		t.Fatalf("data files hold %d rows in %d row groups, want %d rows in at least 3", total, groups, n)
	}
}
