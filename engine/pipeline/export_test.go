package pipeline

import pluginv1 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v1"

// Items is items, for tests that hand WAL frames to a destination as the apply loop does.
var Items = items

// TakeRange is takeRange, for the table test of range selection.
var TakeRange = takeRange

// ResolveApply is resolveApply after proposalOf, for the table test of plugin-proposed apply limits.
func ResolveApply(lim ApplyLimits, p *pluginv1.ApplyDefaults) (ApplyLimits, []string) {
	return resolveApply(lim, proposalOf(p))
}
