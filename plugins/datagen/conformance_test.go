package main

import (
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
)

func TestConformance(t *testing.T) {
	bin := conformance.Build(t, ".")
	for _, tc := range []struct {
		name     string
		settings string
	}{
		{"flat", `{"seed": 7, "rows": 500, "batch_size": 100}`},
		{"nested-with-changes", `{"seed": 7, "rows": 500, "batch_size": 100, "nested": true, "update_ratio": 0.2, "delete_ratio": 0.05}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conformance.Run(t, conformance.Config{Binary: bin, Settings: []byte(tc.settings), BadSettings: []byte(`{"batch_size": 0}`)})
		})
	}
}
