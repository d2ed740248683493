package pipeline

import (
	"encoding/json"
)

// TruncateSetting is the source setting that says what a source does with a truncate of a replicated table;
// with the value TruncatePropagate the source sends it as a change, which every destination must apply.
const (
	TruncateSetting   = "truncate"
	TruncatePropagate = "propagate"
)

// SourceTruncates says whether a source configured with settings sends truncates: its truncate setting, or
// when unset the default its settings schema declares, is "propagate". The protocol has no source capability
// call, so the convention lives in the settings a plugin publishes; a source without the setting never sends
// one. Unreadable JSON counts as not propagating: the settings were validated against the schema before this.
func SourceTruncates(settingsSchema, settings []byte) bool {
	var set map[string]json.RawMessage
	if json.Unmarshal(settings, &set) == nil {
		if v, ok := set[TruncateSetting]; ok {
			var s string
			return json.Unmarshal(v, &s) == nil && s == TruncatePropagate
		}
	}
	var sch struct {
		Properties map[string]struct {
			Default any `json:"default"`
		} `json:"properties"`
	}
	if json.Unmarshal(settingsSchema, &sch) != nil {
		return false
	}
	p, ok := sch.Properties[TruncateSetting]
	return ok && p.Default == TruncatePropagate
}
