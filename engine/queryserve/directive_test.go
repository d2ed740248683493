package queryserve

import "testing"

func TestDirective(t *testing.T) {
	lake, del, both := directives{asOfLake: true}, directives{includeDeleted: true}, directives{asOfLake: true, includeDeleted: true}
	for _, c := range []struct {
		sql, rest string
		want      directives
	}{
		{"SELECT 1", "SELECT 1", directives{}},
		{"/* skippr: as_of_lake */ SELECT 1", " SELECT 1", lake},
		{"\n  /*SKIPPR:AS_OF_LAKE*/\nSELECT 1", "\nSELECT 1", lake},
		{"/* skippr : as_of_lake */SELECT 1", "SELECT 1", lake},
		{"SELECT '/* skippr: as_of_lake */'", "SELECT '/* skippr: as_of_lake */'", directives{}},
		{"SELECT 1 /* skippr: as_of_lake */", "SELECT 1 /* skippr: as_of_lake */", directives{}},
		{"/* other */ /* skippr: as_of_lake */ SELECT 1", "/* other */ /* skippr: as_of_lake */ SELECT 1", directives{}},
		{"/* skippr: as_of_lakes */ SELECT 1", "/* skippr: as_of_lakes */ SELECT 1", directives{}},
		{"/* skippr: include_deleted */ SELECT 1", " SELECT 1", del},
		{"/* skippr: as_of_lake, include_deleted */ SELECT 1", " SELECT 1", both},
		{"/* skippr: include_deleted ,as_of_lake*/SELECT 1", "SELECT 1", both},
		{"/* skippr: include_deleted, other */ SELECT 1", "/* skippr: include_deleted, other */ SELECT 1", directives{}},
	} {
		rest, d := directive(c.sql)
		if rest != c.rest || d != c.want {
			t.Errorf("directive(%q) = %q, %+v; want %q, %+v", c.sql, rest, d, c.rest, c.want)
		}
		if c.want != (directives{}) {
			if _, again := directive(withDirective(rest, d)); again != d {
				t.Errorf("withDirective(%q, %+v) reads back as %+v", rest, d, again)
			}
		}
	}
	h := handle{SQL: "/* skippr: as_of_lake */ SELECT * FROM t WHERE id = ?", Args: []string{"1"}}
	if rest, d := directive(h.statement()); d != lake || rest != " PREPARE _skippr_prepared AS SELECT * FROM t WHERE id = ?;\nEXECUTE _skippr_prepared(1)" {
		t.Errorf("bound statement %q lost or misplaced the directive", h.statement())
	}
}
