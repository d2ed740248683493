package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

var sizeUnits = []struct {
	name string
	mult int64
}{
	{"TiB", 1 << 40},
	{"GiB", 1 << 30},
	{"MiB", 1 << 20},
	{"KiB", 1 << 10},
	{"B", 1},
}

// parseSize reads a byte size: a whole number followed by an optional unit B, KiB, MiB,
// GiB or TiB ("8MiB", "8 MiB", "512"). Decimal units (MB) are refused rather than guessed.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("want a whole number of bytes with an optional unit B, KiB, MiB, GiB or TiB, e.g. 8MiB")
	}
	unit := strings.TrimSpace(t[i:])
	mult := int64(-1)
	if unit == "" {
		mult = 1
	}
	for _, u := range sizeUnits {
		if unit == u.name {
			mult = u.mult
		}
	}
	if mult < 0 {
		return 0, &detailError{
			full:    fmt.Sprintf("unknown unit %q (use B, KiB, MiB, GiB or TiB)", unit),
			generic: "unknown unit (use B, KiB, MiB, GiB or TiB)",
		}
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("too large")
	}
	return n * mult, nil
}

// parseDuration reads a Go duration ("200ms", "1m30s"); negative durations are refused.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		// time's message repeats the input; ours is shown next to it already.
		return 0, fmt.Errorf("want a duration such as 200ms, 2s or 1m30s")
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative")
	}
	return d, nil
}
