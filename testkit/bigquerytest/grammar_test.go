package bigquerytest

import (
	"strings"
	"testing"
)

// TestGrammarRefuses: statements outside the documented grammar — PostgreSQL forms, other statements, reserved
// words as names, MERGE clauses out of order — are refused, so the stand-in cannot accept what BigQuery would
// reject.
func TestGrammarRefuses(t *testing.T) {
	for name, sql := range map[string]string{
		"pg upsert":                        "INSERT INTO `p`.`d`.`t` (`a`) SELECT c0 FROM `p`.`d`.`s` ON CONFLICT DO NOTHING",
		"insert or replace":                "INSERT OR REPLACE INTO `p`.`d`.`t` (`a`) SELECT c0 FROM `p`.`d`.`s`",
		"double quotes":                    `DELETE FROM "p"."d"."t" WHERE TRUE`,
		"bare begin":                       "BEGIN; COMMIT TRANSACTION",
		"delete without where":             "DELETE FROM `p`.`d`.`t`",
		"truncate":                         "TRUNCATE TABLE `p`.`d`.`t`",
		"two-part table":                   "DELETE FROM `d`.`t` WHERE TRUE",
		"reserved name":                    "SELECT end FROM `p`.`d`.`t` WHERE pipeline = @p",
		"merge without when":               "MERGE `p`.`d`.`t` T USING `p`.`d`.`s` S ON T.a = S.c0",
		"unreachable matched":              "MERGE `p`.`d`.`t` T USING `p`.`d`.`s` S ON T.a = S.c0 WHEN MATCHED THEN DELETE WHEN MATCHED AND S.x = 1 THEN DELETE",
		"not matched by source":            "MERGE `p`.`d`.`t` T USING `p`.`d`.`s` S ON T.a = S.c0 WHEN NOT MATCHED BY SOURCE THEN DELETE",
		"insert count":                     "MERGE `p`.`d`.`t` T USING `p`.`d`.`s` S ON T.a = S.c0 WHEN NOT MATCHED THEN INSERT (a, b) VALUES (S.c0)",
		"update in not matched":            "MERGE `p`.`d`.`t` T USING `p`.`d`.`s` S ON T.a = S.c0 WHEN NOT MATCHED THEN UPDATE SET a = S.c0",
		"create table":                     "CREATE TABLE `p`.`d`.`t` (a INT64)",
		"rename without column":            "ALTER TABLE `p`.`d`.`t` RENAME `a` TO `b`",
		"alter add column":                 "ALTER TABLE `p`.`d`.`t` ADD COLUMN `a` INT64",
		"unclosed string":                  "SELECT a FROM `p`.`d`.`t` WHERE a = 'x",
		"semicolon only":                   ";",
		"qualify other window":             "MERGE `p`.`d`.`t` T USING (SELECT * FROM `p`.`d`.`s` WHERE TRUE QUALIFY RANK() OVER (PARTITION BY c0 ORDER BY o DESC) = 1) S ON T.a = S.c0 WHEN MATCHED THEN DELETE",
		"latest filtered by a comparison":  "MERGE `p`.`d`.`t` T USING (SELECT * FROM `p`.`d`.`s` WHERE x = 1 QUALIFY ROW_NUMBER() OVER (PARTITION BY c0 ORDER BY o DESC) = 1) S ON T.a = S.c0 WHEN MATCHED THEN DELETE",
		"now is not googlesql":             "MERGE `p`.`d`.`t` T USING `p`.`d`.`s` S ON T.a = S.c0 WHEN MATCHED THEN UPDATE SET b = now()",
		"current_timestamp without parens": "INSERT INTO `p`.`d`.`t` (`a`, `b`) SELECT c0, CURRENT_TIMESTAMP FROM `p`.`d`.`s`",
		"declare after begin":              "BEGIN TRANSACTION; DECLARE v TIMESTAMP DEFAULT CURRENT_TIMESTAMP(); COMMIT TRANSACTION",
		"declare other default":            "DECLARE v TIMESTAMP DEFAULT 1",
		"qualify ascending":                "MERGE `p`.`d`.`t` T USING (SELECT * FROM `p`.`d`.`s` WHERE TRUE QUALIFY ROW_NUMBER() OVER (PARTITION BY c0 ORDER BY o) = 1) S ON T.a = S.c0 WHEN MATCHED THEN DELETE",
	} {
		if _, err := Parse(sql); err == nil || !strings.Contains(err.Error(), "rror") && !strings.Contains(err.Error(), "Inserted row") {
			t.Errorf("%s: %q was accepted (err %v)", name, sql, err)
		}
	}
}

// TestGrammarDeclare: a variable declared first is a parameter of the statements after it, by any case.
func TestGrammarDeclare(t *testing.T) {
	st, err := Parse("DECLARE _skippr_now TIMESTAMP DEFAULT CURRENT_TIMESTAMP();\nBEGIN TRANSACTION;\n" +
		"INSERT INTO `p`.`d`.`t` (`a`, `at`) SELECT c0, _SKIPPR_NOW FROM `p`.`d`.`s`;\nCOMMIT TRANSACTION;")
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Kind != KindDeclare || st[0].Postgres != "SELECT statement_timestamp()" {
		t.Errorf("declare: %+v", st[0])
	}
	if want := `INSERT INTO "d"."t" ("a", "at") SELECT "c0", ` + paramPrefix + varPrefix + "_SKIPPR_NOW\x00" + ` FROM "d"."s"`; st[2].Postgres != want {
		t.Errorf("insert:\n got %q\nwant %q", st[2].Postgres, want)
	}
}

// TestGrammarTranslates: accepted statements become the PostgreSQL the executor runs.
func TestGrammarTranslates(t *testing.T) {
	for sql, want := range map[string]string{
		"DELETE FROM `p`.`d`.`t` WHERE TRUE":                            `DELETE FROM "d"."t" WHERE TRUE`,
		"ALTER TABLE `p`.`d`.`t` RENAME COLUMN `qty` TO `order amount`": `ALTER TABLE "d"."t" RENAME COLUMN "qty" TO "order amount"`,
		"ALTER TABLE `p`.`d`.`t` RENAME TO `order lines`":               `ALTER TABLE "d"."t" RENAME TO "order lines"`,
		"MERGE `p`.`d`.`t` AS T USING `p`.`d`.`s` AS S ON T.`id` = S.c0 WHEN MATCHED AND S._skippr_op = 3 THEN DELETE WHEN NOT MATCHED BY TARGET AND S._skippr_op <> 3 THEN INSERT (`id`) VALUES (S.c0)":                                                                                                       `MERGE INTO "d"."t" AS "T" USING "d"."s" AS "S" ON "T"."id" = "S"."c0" WHEN MATCHED AND "S"."_skippr_op" = 3 THEN DELETE WHEN NOT MATCHED AND "S"."_skippr_op" <> 3 THEN INSERT ("id") VALUES ( "S"."c0" )`,
		"MERGE `p`.`d`.`t` AS T USING (SELECT * FROM `p`.`d`.`s` WHERE TRUE QUALIFY ROW_NUMBER() OVER (PARTITION BY c0, c1 ORDER BY _skippr_ord DESC) = 1) AS S ON T.a = S.c0 WHEN MATCHED THEN DELETE":                                                                                                        `MERGE INTO "d"."t" AS "T" USING (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "c0", "c1" ORDER BY "_skippr_ord" DESC) AS "_skippr_rn" FROM "d"."s") AS "_skippr_q" WHERE "_skippr_rn" = 1) AS "S" ON "T"."a" = "S"."c0" WHEN MATCHED THEN DELETE`,
		"MERGE `p`.`d`.`t` AS T USING (SELECT * FROM `p`.`d`.`s` WHERE _skippr_vals QUALIFY ROW_NUMBER() OVER (PARTITION BY c0 ORDER BY _skippr_ord DESC) = 1) AS S ON T.a = S.c0 WHEN MATCHED AND S._skippr_vals = FALSE THEN UPDATE SET `_skippr_deleted` = TRUE, `_skippr_synced_at` = CURRENT_TIMESTAMP()": `MERGE INTO "d"."t" AS "T" USING (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "c0" ORDER BY "_skippr_ord" DESC) AS "_skippr_rn" FROM "d"."s" WHERE "_skippr_vals") AS "_skippr_q" WHERE "_skippr_rn" = 1) AS "S" ON "T"."a" = "S"."c0" WHEN MATCHED AND "S"."_skippr_vals" = FALSE THEN UPDATE SET "_skippr_deleted" = TRUE, "_skippr_synced_at" = statement_timestamp()`,
		"INSERT INTO `p`.`d`.`t` (`a`, `_skippr_deleted`, `_skippr_synced_at`) SELECT c0, FALSE, CURRENT_TIMESTAMP() FROM `p`.`d`.`s`":                                                                                                                                                                         `INSERT INTO "d"."t" ("a", "_skippr_deleted", "_skippr_synced_at") SELECT "c0", FALSE, statement_timestamp() FROM "d"."s"`,
		"SELECT stream, last_sequence FROM `p`.`d`.`_skippr_state` WHERE pipeline = @pipeline":                                                                                                                                                                                                                 "SELECT \"stream\", \"last_sequence\" FROM \"d\".\"_skippr_state\" WHERE \"pipeline\" = \x00param:pipeline\x00",
	} {
		st, err := Parse(sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if st[0].Postgres != want {
			t.Errorf("%s\n got %s\nwant %s", sql, st[0].Postgres, want)
		}
	}
}
