package dest

import (
	"errors"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestServiceErrorsAreClassified: the errors Snowflake documents as the statement's or the data's fault (its
// error codes and SQL states: 002003/42S02 object does not exist, 000904 invalid identifier, 003001/42501
// insufficient privileges, 000606 no active warehouse, SQL state class 22 for a value that cannot be read or
// held — 100038 numeric value not recognized, 100039 numeric value out of range, 100071 failed to cast a
// variant; 001003 a syntax error) stop the pipeline as a config or data fault that names the table and says
// what to do; a timeout or a lock wait stays retryable. The stand-in answers each code (FailNext) for the
// service, which cannot run here.
func TestServiceErrorsAreClassified(t *testing.T) {
	if live() {
		t.Skip("makes the stand-in answer errors; a live account's are not the test's to choose")
	}
	tg := newTarget(t, nil)
	s := ordersSchema()
	st := tg.stream("public.orders")
	r := orders(s, order{op: change.OpInsert, id: 1, name: "a", color: "c", atUnix: 1})
	defer r.Release()
	tg.apply(1, 1, item(st, 1, r))
	const merge, copyInto = `MERGE INTO "ANALYTICS"."RAW"."ORDERS"`, `COPY INTO`
	for _, c := range []struct {
		name, stmt string
		code       int
		state, msg string
		class      fault.Class
		mentions   string // besides the table, or the warehouse for a statement that names no table
	}{
		{"object does not exist", merge, 2003, "42S02", "SQL compilation error:\nObject 'ANALYTICS.RAW.ORDERS' does not exist or not authorized.", fault.Config, "restart"},
		{"invalid identifier", merge, 904, "42000", "SQL compilation error: error line 1 at position 120\ninvalid identifier '\"NAME\"'", fault.Config, "column"},
		{"privileges", `PUT `, 3001, "42501", "SQL access control error:\nInsufficient privileges to operate on table stage 'ORDERS'", fault.Config, "GRANT"},
		{"no warehouse", "BEGIN", 606, "57P03", "No active warehouse selected in the current session.  Select an active warehouse with the 'use warehouse' command.", fault.Config, "LOAD_WH"},
		{"numeric out of range", copyInto, 100039, "22003", "Numeric value '1e40' is out of range\n  File 'x.parquet', line 1, character 1, Row 1, column \"_SKIPPR_STAGE_1\"[\"AMOUNT\":3]", fault.Data, "source"},
		{"numeric not recognized", copyInto, 100038, "22018", "Numeric value 'abc' is not recognized", fault.Data, "source"},
		{"variant cast", merge, 100071, "22000", "Failed to cast variant value [1] to OBJECT", fault.Data, "source"},
		{"syntax error", merge, 1003, "42000", "SQL compilation error:\nsyntax error line 1 at position 0 unexpected 'MERGE'.", fault.Config, "bug"},
		{"statement timeout", copyInto, 630, "57014", "Statement reached its statement or warehouse timeout of 60 second(s) and was canceled.", fault.Unknown, ""},
		{"lock wait", merge, 625, "57014", "Statement '01b…' has locked table 'ORDERS' in transaction 1712345 and this lock has not yet been released.", fault.Unknown, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg.standin.FailNext(c.stmt, c.code, c.state, c.msg)
			_, err := tg.d.Apply(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: 2, Sequence: 2,
				Items: []serve.Item{item(st, 2, r)}})
			if err == nil {
				t.Fatal("the apply succeeded")
			}
			if got := fault.ClassOf(err); got != c.class {
				t.Fatalf("class %s, want %s: %v", got, c.class, err)
			}
			if c.class == fault.Unknown {
				return
			}
			msg := err.Error() + " fix: " + fault.FixOf(err)
			if !strings.Contains(msg, "ORDERS") && c.stmt != "BEGIN" || !strings.Contains(msg, c.mentions) || fault.FixOf(err) == "" {
				t.Fatalf("%q: want the table ORDERS, %q and a fix named", msg, c.mentions)
			}
		})
	}
	if a, err := tg.d.LastApplied(tctx(t), tg.settings, tg.pipeline); err != nil || a.Sequence != 1 {
		t.Fatalf("LastApplied %+v, %v: every failed apply must have rolled back", a, err)
	}
}

// TestColumnDroppedOutsideSkippr: a column dropped from the table behind the plugin's back makes the MERGE name
// a column that does not exist; PostgreSQL's undefined_column comes back from the stand-in as Snowflake's
// 000904 invalid identifier (testkit/snowflaketest fromPostgres), and the apply stops as a config fault naming
// the table instead of retrying.
func TestColumnDroppedOutsideSkippr(t *testing.T) {
	if live() {
		t.Skip("alters the table behind the stand-in")
	}
	tg := newTarget(t, nil)
	s := ordersSchema()
	st := tg.stream("public.orders")
	r := orders(s, order{op: change.OpInsert, id: 1, name: "a", color: "c", atUnix: 1})
	defer r.Release()
	tg.apply(1, 1, item(st, 1, r))
	if _, err := tg.pg.Connect(t).Exec(tctx(t), `ALTER TABLE "RAW"."ORDERS" DROP COLUMN "NAME"`); err != nil {
		t.Fatal(err)
	}
	_, err := tg.d.Apply(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: 2, Sequence: 2,
		Items: []serve.Item{item(st, 2, r)}})
	if !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), "000904") || !strings.Contains(err.Error(), "ORDERS") {
		t.Fatalf("apply after a column was dropped: %v (class %s), want a config fault with 000904 naming ORDERS", err, fault.ClassOf(err))
	}
}
