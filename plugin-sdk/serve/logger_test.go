package serve

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// The host (go-plugin's logStderr) parses each JSON line of a plugin's stderr and logs it at its @level, but only
// when @timestamp parses with hclog's layout; any other line is logged at debug, below the engine's level. The
// layout is go-plugin v1.8.0's (log_entry.go, parseJSON), spelled out here rather than taken from hclogTime.
// parseJSON decodes numbers into float64, which the host prints in exponent form: integers must come as text.
func TestLoggerLinesParseAsHclog(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(&buf, "postgres")
	for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError} {
		buf.Reset()
		log.Log(t.Context(), l, "creating a replication slot waits", "pid", 42, "waited", 10*time.Second, "server_id", uint32(1083443), "pos", uint64(21915877), "gtid_seq", int64(1<<60+1))
		var line map[string]any
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("%s: %v: %s", l, err, buf.String())
		}
		ts, _ := line["@timestamp"].(string)
		if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", ts); err != nil {
			t.Fatalf("%s: go-plugin cannot parse @timestamp %q: %v", l, ts, err)
		}
		if want := map[slog.Level]string{slog.LevelDebug: "debug", slog.LevelInfo: "info", slog.LevelWarn: "warn", slog.LevelError: "error"}[l]; line["@level"] != want ||
			line["@message"] != "creating a replication slot waits" || line["@module"] != "postgres" || line["pid"] != "42" || line["waited"] != "10s" ||
			line["server_id"] != "1083443" || line["pos"] != "21915877" || line["gtid_seq"] != "1152921504606846977" {
			t.Fatalf("%s: line %s", l, buf.String())
		}
	}
}
