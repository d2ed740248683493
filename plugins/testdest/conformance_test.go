package main

import (
	"fmt"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
)

func TestConformance(t *testing.T) {
	bin := conformance.Build(t, ".")
	dir := t.TempDir()
	cfg := conformance.Config{Binary: bin, Settings: []byte(fmt.Sprintf(`{"dir": %q}`, dir)), BadSettings: []byte(`{"dir": ""}`),
		Rows: func(stream string) (map[string]map[string]string, error) {
			st, err := filedest.Load(dir)
			if err != nil {
				return nil, err
			}
			rows := map[string]map[string]string{}
			for key, values := range st.Tables[stream] {
				row := map[string]string{}
				for col, v := range values {
					row[col] = fmt.Sprint(v)
				}
				rows[key] = row // the key is the id's JSON, which for an integer is its text
			}
			return rows, nil
		}}
	conformance.Run(t, cfg)
}
