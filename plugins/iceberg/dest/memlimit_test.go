package dest

import (
	"encoding/json"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
)

// The JSON Schema the engine validates configs with accepts exactly the memory_limit values ParseSettings does.
func TestMemoryLimitSchemaAgreesWithParse(t *testing.T) {
	sch, err := conformance.CompileSchema([]byte(SettingsSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{`"256MiB"`, `"2 GiB"`, `"64MB"`, `67108864`, `"off"`, `"OFF"`, `"16MiB"`, `"lots"`, `"12 parsecs"`, `1024`, `-1`, `"1.5GiB"`} {
		raw := `{"catalog": {"warehouse": "/x"}, "memory_limit": ` + v + `}`
		var doc any
		if err := json.Unmarshal([]byte(raw), &doc); err != nil {
			t.Fatal(err)
		}
		schemaErr := sch.Validate(doc)
		_, parseErr := ParseSettings(json.RawMessage(raw))
		// The schema checks the form; the minimum of a string size is ParseSettings' alone.
		if v == `"16MiB"` {
			if schemaErr != nil || parseErr == nil {
				t.Errorf("%s: schema %v, parse %v; want the schema to pass it and the parse to refuse it", v, schemaErr, parseErr)
			}
			continue
		}
		if (schemaErr == nil) != (parseErr == nil) {
			t.Errorf("memory_limit %s: schema says %v, ParseSettings says %v", v, schemaErr, parseErr)
		}
	}
}
