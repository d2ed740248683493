package queryserve

import "testing"

func TestDirective(t *testing.T) {
	for _, c := range []struct {
		sql, rest string
		asOfLake  bool
	}{
		{"SELECT 1", "SELECT 1", false},
		{"/* skippr: as_of_lake */ SELECT 1", " SELECT 1", true},
		{"\n  /*SKIPPR:AS_OF_LAKE*/\nSELECT 1", "\nSELECT 1", true},
		{"/* skippr : as_of_lake */SELECT 1", "SELECT 1", true},
		{"SELECT '/* skippr: as_of_lake */'", "SELECT '/* skippr: as_of_lake */'", false},
		{"SELECT 1 /* skippr: as_of_lake */", "SELECT 1 /* skippr: as_of_lake */", false},
		{"/* other */ /* skippr: as_of_lake */ SELECT 1", "/* other */ /* skippr: as_of_lake */ SELECT 1", false},
		{"/* skippr: as_of_lakes */ SELECT 1", "/* skippr: as_of_lakes */ SELECT 1", false},
	} {
		rest, asOf := directive(c.sql)
		if rest != c.rest || asOf != c.asOfLake {
			t.Errorf("directive(%q) = %q, %v; want %q, %v", c.sql, rest, asOf, c.rest, c.asOfLake)
		}
	}
	h := handle{SQL: "/* skippr: as_of_lake */ SELECT * FROM t WHERE id = ?", Args: []string{"1"}}
	if rest, asOf := directive(h.statement()); !asOf || rest != " PREPARE _skippr_prepared AS SELECT * FROM t WHERE id = ?;\nEXECUTE _skippr_prepared(1)" {
		t.Errorf("bound statement %q lost or misplaced the directive", h.statement())
	}
}
