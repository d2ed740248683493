package snowflaketest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestGrammarRefuses: statements near the allowed shapes but outside them are refused, so the allow-list is
// not a pattern that accepts anything.
func TestGrammarRefuses(t *testing.T) {
	for _, q := range []string{
		`SELECT * FROM "A"."B"."C"`,
		`DROP TABLE "A"."B"."C"`,
		`BEGIN; DROP TABLE "A"."B"."C"`,
		`CREATE TABLE IF NOT EXISTS A.B.C ("X" VARCHAR)`,            // unquoted names
		`create table if not exists "A"."B"."C" ("X" VARCHAR)`,      // the plugin's spelling only
		`CREATE TABLE IF NOT EXISTS "A"."B"."C" ("X" TEXT2)`,        // no such type
		`CREATE TABLE IF NOT EXISTS "A"."B"."C" ("X" NUMBER(39,0))`, // NUMBER holds 38 digits
		`CREATE TABLE "A"."B"."C" ("X" VARCHAR)`,                    // not IF NOT EXISTS
		`CREATE TABLE IF NOT EXISTS "A"."B"."C" ("X"" VARCHAR)`,     // broken quoting
		`PUT 'file:///tmp/x' @"A"."B".%"C"/skippr/ AUTO_COMPRESS = TRUE SOURCE_COMPRESSION = NONE OVERWRITE = TRUE`,
		`PUT 'file:///tmp/x' @"A"."B".%"C"/skippr/ AUTO_COMPRESS = FALSE SOURCE_COMPRESSION = NONE`,
		`COPY INTO "A"."B"."S" FROM @"A"."B".%"C"/skippr/ FILES = ('f.parquet') FILE_FORMAT = (TYPE = PARQUET)`,
		`COPY INTO "A"."B"."S" FROM @"A"."B".%"C"/skippr/ FILES = ('../f') FILE_FORMAT = (TYPE = PARQUET) MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE FORCE = TRUE PURGE = TRUE`,
		`MERGE INTO "A"."B"."C" AS t USING "A"."B"."S" AS s ON t."ID" = s."ID" WHEN MATCHED THEN UPDATE SET t."X" = s."X" WHEN NOT MATCHED AND s."_SKIPPR_OP" <> 3 THEN INSERT ("ID") VALUES (s."ID")`,
		`MERGE INTO "A"."B"."C" AS t USING "A"."B"."S" AS s ON t."ID" = s."ID" WHEN MATCHED AND s."_SKIPPR_OP" = 3 THEN DELETE WHEN NOT MATCHED AND s."_SKIPPR_OP" <> 3 THEN INSERT ("ID") VALUES (s."ID"); COMMIT`,
		`INSERT INTO "A"."B"."C" ("X") VALUES (1)`,
		`DELETE FROM "A"."B"."C" WHERE 1 = 1`,
		`ALTER TABLE "A"."B"."C" DROP COLUMN "X"`,
		`ALTER TABLE "A"."B"."C" ALTER COLUMN "X" SET DATA TYPE VARCHAR`,
		`USE ROLE "ACCOUNTADMIN"`,
	} {
		if r, err := Allowed(q); err == nil {
			t.Errorf("allowed by rule %q: %s", r.Name, q)
		}
	}
}

// client speaks the stand-in's REST protocol without gosnowflake, for the stand-in's own tests.
type client struct {
	t     *testing.T
	base  string
	token string
}

func (c *client) post(path string, body any) map[string]any {
	c.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", c.base+path, bytes.NewReader(b))
	if c.token != "" {
		req.Header.Set("Authorization", `Snowflake Token="`+c.token+`"`)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *client) exec(q string) map[string]any {
	c.t.Helper()
	return c.post("/queries/v1/query-request", map[string]any{"sqlText": q})
}

func (c *client) mustExec(q string) map[string]any {
	c.t.Helper()
	r := c.exec(q)
	if r["success"] != true {
		c.t.Fatalf("%s: %v", q, r["message"])
	}
	return r
}

// TestDDLCommitsTheOpenTransaction: as in Snowflake, a DDL statement commits the session's open transaction,
// so a destination that relied on DDL rolling back with its rows would be caught here, not in production.
func TestDDLCommitsTheOpenTransaction(t *testing.T) {
	db := pgtest.NewDB(t)
	s := New(t, Options{Account: "a", User: "u", Password: "p", Database: "D", Schema: "S", Warehouse: "W", Role: "R", ConnString: db.ConnString()})
	c := &client{t: t, base: "http://" + s.Host + ":" + strconv.Itoa(s.Port)}
	login := c.post("/session/v1/login-request", map[string]any{"data": map[string]any{"ACCOUNT_NAME": "a", "LOGIN_NAME": "u", "PASSWORD": "p"}})
	if login["success"] != true {
		t.Fatalf("login: %v", login)
	}
	c.token = login["data"].(map[string]any)["token"].(string)
	c.mustExec(`CREATE TABLE IF NOT EXISTS "D"."S"."T" ("ID" NUMBER(38,0))`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := db.Connect(t)
	if _, err := conn.Exec(ctx, `INSERT INTO "S"."T" VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	c.mustExec("BEGIN")
	c.mustExec(`DELETE FROM "D"."S"."T"`)
	c.mustExec(`ALTER TABLE "D"."S"."T" ADD COLUMN "X" VARCHAR`)
	c.mustExec("ROLLBACK")
	rows, err := s.Rows(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 {
		t.Fatalf("the DELETE before ALTER TABLE was rolled back (%v); Snowflake commits it at the DDL", rows)
	}
	// A statement outside the allow-list is refused and recorded.
	if r := c.exec(`SELECT * FROM "D"."S"."T"`); r["success"] != false || !strings.Contains(r["message"].(string), "outside the documented Snowflake syntax") {
		t.Fatalf("refusal: %v", r)
	}
	if len(s.Rejected()) != 1 {
		t.Fatalf("rejected %v", s.Rejected())
	}
}
