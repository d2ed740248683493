package dest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// DefaultMemoryLimit is the memory_limit when the settings give none: issue #31's bound for every destination.
// A range of any size keeps within it (the key index spills to disk, keyruns.go); what it costs is apply time
// (BENCHMARKS.md, the backlog table).
const DefaultMemoryLimit = 256 << 20

// minMemoryLimit is the smallest cap accepted: below it the process's fixed cost (runtime, catalog, Parquet
// writer buffers) leaves nothing to buffer rows in.
const minMemoryLimit = 32 << 20

// NoMemoryLimit is memory_limit "off": an apply is held in memory whole, however large.
const NoMemoryLimit ByteSize = -1

// ByteSize is a size in bytes, written in settings as a number of bytes or a string such as "256MiB".
type ByteSize int64

var byteSizeRE = regexp.MustCompile(`^\s*(\d+)\s*([KMGT]i?B|B)?\s*$`)

var byteUnits = map[string]int64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}

func (b *ByteSize) UnmarshalJSON(data []byte) error {
	var n int64
	if err := json.Unmarshal(data, &n); err == nil {
		if n < 0 {
			return fmt.Errorf("%d is negative (\"off\" lifts the limit)", n)
		}
		*b = ByteSize(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("want a number of bytes or a string such as \"256MiB\", got %s", data)
	}
	v, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

func parseByteSize(s string) (ByteSize, error) {
	if strings.EqualFold(strings.TrimSpace(s), "off") {
		return NoMemoryLimit, nil
	}
	m := byteSizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a size: want bytes or a number with B, KiB, MiB, GiB (or KB, MB, GB), or \"off\"", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	unit := byteUnits[m[2]]
	if n > (1<<62)/unit {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return ByteSize(n * unit), nil
}

// checkMemoryLimit fills in the default memory_limit and refuses one too small to work with.
func (s *Settings) checkMemoryLimit() error {
	switch {
	case s.MemoryLimit == 0:
		s.MemoryLimit = DefaultMemoryLimit
	case s.MemoryLimit == NoMemoryLimit:
	case s.MemoryLimit < minMemoryLimit:
		return fmt.Errorf("settings: memory_limit %d is below %d MiB", s.MemoryLimit, minMemoryLimit>>20)
	}
	return nil
}

// bufferBudget is how many bytes of Arrow data an apply buffers before it writes them out. Folding a buffer
// copies the surviving rows, and the Parquet writer holds a row group besides, so the buffer gets a quarter of
// the cap; the rest is that working memory, the key index and the runtime. Zero means no limit.
func (s Settings) bufferBudget() int64 {
	if s.MemoryLimit == NoMemoryLimit {
		return 0
	}
	return int64(s.MemoryLimit) / 4
}
