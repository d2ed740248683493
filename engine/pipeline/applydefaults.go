package pipeline

import (
	"fmt"
	"strings"
)

// ApplyKeys names apply limits, one flag per key of a connection's `apply:`.
type ApplyKeys struct {
	MaxInterval, MaxBytes, MaxEntries bool
}

// proposalOf is a destination's proposed limits (Capabilities.ApplyDefaults, nil: none) as ApplyLimits; a
// field of 0 (or less) proposes nothing.
func proposalOf(p *ApplyDefaults) ApplyLimits {
	if p == nil {
		return ApplyLimits{}
	}
	return ApplyLimits{MaxInterval: p.MaxInterval, MaxBytes: p.MaxBytes, MaxEntries: int(p.MaxEntries)}
}

// resolveApply returns the limits a destination applies with: each limit in lim.Unset takes the destination's
// proposal when it makes one, and keeps lim's value otherwise (MaxBytes 0 being DefaultApplyMaxBytes). A limit
// the connection states wins over any proposal, 0 included, so `max_interval: 0s` stays "no wait" for a
// warehouse. taken names the keys a proposal set, for the log.
func resolveApply(lim, proposed ApplyLimits) (eff ApplyLimits, taken []string) {
	if lim.Unset.MaxInterval && proposed.MaxInterval > 0 {
		lim.MaxInterval = proposed.MaxInterval
		taken = append(taken, "max_interval")
	}
	if lim.Unset.MaxBytes && proposed.MaxBytes > 0 {
		lim.MaxBytes = proposed.MaxBytes
		taken = append(taken, "max_bytes")
	}
	if lim.Unset.MaxEntries && proposed.MaxEntries > 0 {
		lim.MaxEntries = proposed.MaxEntries
		taken = append(taken, "max_entries")
	}
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultApplyMaxBytes
	}
	return lim, taken
}

// proposalMessage is the log line that says which apply limits of destination d came from its plugin and which
// key of the connection overrides them.
func proposalMessage(d Endpoint[Destination], lim ApplyLimits, taken []string) string {
	vals := make([]string, len(taken))
	for i, k := range taken {
		switch k {
		case "max_interval":
			vals[i] = fmt.Sprintf("apply.%s %s", k, lim.MaxInterval)
		case "max_bytes":
			vals[i] = fmt.Sprintf("apply.%s %d", k, lim.MaxBytes)
		case "max_entries":
			vals[i] = fmt.Sprintf("apply.%s %d", k, lim.MaxEntries)
		}
	}
	plugin := d.PluginName
	if plugin == "" {
		plugin = "of destination " + d.Name
	}
	keys := "apply." + strings.Join(taken, ", apply.")
	return fmt.Sprintf("%s proposed by plugin %s; set %s on connection %s to change", strings.Join(vals, ", "), plugin, keys, d.Name)
}

// ApplyStatus is a destination's effective apply limits, as `skippr status --json` shows them.
type ApplyStatus struct {
	// Coalesce: the destination takes ranges; without it every apply is one entry and the limits are unused.
	Coalesce      bool  `json:"coalesce"`
	MaxIntervalMS int64 `json:"max_interval_ms"`
	MaxBytes      int64 `json:"max_bytes"`
	MaxEntries    int   `json:"max_entries"` // 0 is no limit
	// FromPlugin names the limits the destination plugin proposed because the connection left them out.
	FromPlugin []string `json:"from_plugin,omitempty"`
}
