package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/testkit/pgtest"
	"github.com/skippr-dev/skippr/testkit/snowflaketest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConformance runs the SDK's destination checks on the plugin binary, against the Snowflake stand-in.
func TestConformance(t *testing.T) {
	bin := conformance.Build(t, ".")
	db := pgtest.NewDB(t)
	srv := snowflaketest.New(t, snowflaketest.Options{Account: "conf", User: "u", Password: "p", Database: "DB",
		Schema: "CONF", Warehouse: "WH", Role: "R", ConnString: db.ConnString()})
	settings := func(password string) []byte {
		b, err := json.Marshal(map[string]any{"account": "conf", "user": "u", "password": password, "warehouse": "WH",
			"role": "R", "database": "DB", "schema": "CONF", "host": srv.Host, "port": srv.Port, "protocol": "http"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	conformance.Run(t, conformance.Config{Binary: bin, Settings: settings("p"), BadSettings: settings("wrong"), Timeout: 3 * time.Minute})
	if r := srv.Rejected(); len(r) > 0 {
		t.Fatalf("the stand-in refused statements outside the allow-list: %q", r)
	}
}
