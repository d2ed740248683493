package main

import (
	"fmt"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
)

func TestConformance(t *testing.T) {
	bin := conformance.Build(t, ".")
	dir := t.TempDir()
	conformance.Run(t, conformance.Config{Binary: bin, Settings: []byte(fmt.Sprintf(`{"dir": %q}`, dir)), BadSettings: []byte(`{"dir": ""}`)})
}
