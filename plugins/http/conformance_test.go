package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
)

// TestConformance runs the kit with NoReplay and one checkpoint: a push source has nothing to replay (its
// data arrives in requests, and a client that got no 200 re-sends), and a Read begins with an idle
// checkpoint, at which the kit's read stops. TestHTTPSource covers reading posted data, acks, and Read from
// a checkpoint.
func TestConformance(t *testing.T) {
	bin := conformance.Build(t, ".")
	settings, err := json.Marshal(map[string]any{
		"listen":       "127.0.0.1:0",
		"address_file": filepath.Join(t.TempDir(), "addr"),
		"streams": map[string]any{
			"events": map[string]any{"primary_key": "/id"},
			"logs":   map[string]any{},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, conformance.Config{
		Binary:      bin,
		Settings:    settings,
		BadSettings: []byte(`{"streams": {}}`),
		Checkpoints: 1,
		NoReplay:    true,
	})
}
