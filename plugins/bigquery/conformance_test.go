package main

import (
	"encoding/json"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/testkit/bigquerytest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The conformance kit's checks against the plugin binary, writing to the BigQuery stand-in.
func TestConformance(t *testing.T) {
	bin := conformance.Build(t, ".")
	s := bigquerytest.Start(t, "skippr-conformance")
	settings, _ := json.Marshal(map[string]any{"project": s.Project, "dataset": "conf", "endpoint": s.URL})
	bad, _ := json.Marshal(map[string]any{"project": "Not A Project", "dataset": "conf"})
	conformance.Run(t, conformance.Config{Binary: bin, Settings: settings, BadSettings: bad})
}
