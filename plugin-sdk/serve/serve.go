package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// Option changes how Serve runs.
type Option func(*options)

type options struct {
	protocols []int
}

// WithProtocolVersions overrides the protocol versions the plugin offers. Only tests of version negotiation
// need it.
func WithProtocolVersions(v ...int) Option { return func(o *options) { o.protocols = v } }

// Serve runs p as a plugin process and returns when the host ends it. Run with protocol.InfoFlag as the only
// argument, it prints the plugin's Info and exits instead.
func Serve(p Plugin, opts ...Option) {
	o := options{protocols: protocol.PluginVersions}
	for _, opt := range opts {
		opt(&o)
	}
	sp := p.Spec()
	if len(os.Args) == 2 && os.Args[1] == protocol.InfoFlag {
		_ = json.NewEncoder(os.Stdout).Encode(protocol.Info{Name: sp.Name, Version: sp.Version, Kind: sp.Kind.String(), ProtocolVersions: o.protocols})
		os.Exit(0)
	}
	// The host parses hclog-style JSON lines from our stderr and logs them at their level.
	slog.SetDefault(Logger(sp.Name))
	defer scratchDir(os.TempDir(), sp.Name, slog.Default())()
	profCtx, stopProf := context.WithCancel(context.Background())
	defer stopProf()
	writeExitProfile := heapProfiles(profCtx, slog.Default())
	impl := newServer(p, nil)
	go exitWithParent(os.Getppid(), impl.close)
	sets := protocol.PluginSets(impl, o.protocols)
	hs := protocol.Handshake
	hs.ProtocolVersion = uint(o.protocols[0])
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: sets,
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, grpc.MaxRecvMsgSize(protocol.MaxMessageSize), grpc.MaxSendMsgSize(protocol.MaxMessageSize))
			return grpc.NewServer(append(opts, protocol.ServerOptions()...)...)
		},
	})
	// The host ended the plugin: release what the destination sessions hold (a DuckDB file's lock, pools).
	if err := impl.close(); err != nil {
		slog.Error("close destination sessions", "err", err)
	}
	writeExitProfile()
}

// Logger returns a slog logger whose JSON lines the host understands (hclog's @level/@message keys).
func Logger(name string) *slog.Logger { return newLogger(os.Stderr, name) }

// hclogTime is the only @timestamp layout go-plugin's host accepts (log_entry.go parseJSON): a line whose
// timestamp it cannot parse (slog's own has up to nine fractional digits) is logged whole at debug level, so
// at the engine's level a plugin's warnings and errors vanished.
const hclogTime = "2006-01-02T15:04:05.000000Z07:00"

func newLogger(w io.Writer, name string) *slog.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			switch a.Value.Kind() {
			case slog.KindDuration:
				// JSON would carry nanoseconds, which the host prints as a float ("1e+10").
				a.Value = slog.StringValue(a.Value.Duration().String())
			case slog.KindInt64, slog.KindUint64:
				// The host decodes a line's JSON numbers into float64 and prints large ones in exponent form
				// (server_id=1.083443e+06, pos=2.1915877e+07), rounding beyond 2^53: as text they arrive exact.
				a.Value = slog.StringValue(a.Value.String())
			}
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.LevelKey:
				a.Key = "@level"
				a.Value = slog.StringValue(levelName(a.Value.Any()))
			case slog.MessageKey:
				a.Key = "@message"
			case slog.TimeKey:
				a.Key = "@timestamp"
				a.Value = slog.StringValue(a.Value.Time().Format(hclogTime))
			}
			return a
		},
	})
	return slog.New(h).With("@module", name)
}

func levelName(v any) string {
	l, ok := v.(slog.Level)
	if !ok {
		return "info"
	}
	switch {
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warn"
	case l >= slog.LevelInfo:
		return "info"
	}
	return "debug"
}

// DecodeSettings unmarshals settings JSON into v, rejecting unknown fields so a typo is not silently ignored.
func DecodeSettings(settings json.RawMessage, v any) error {
	if len(settings) == 0 {
		settings = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(settings))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	return nil
}

// exitWithParent ends the plugin when its host dies (a SIGKILLed engine cannot stop its plugins): once the
// process is re-parented, nobody will ever call it again, and an orphan would keep holding connections,
// replication slots or ports. On Linux the host's client already asks the kernel to kill the plugin with the
// host (Pdeathsig); this watch is the fallback for other systems and other hosts. Getppid costs well under a
// microsecond, so a 100 ms tick keeps an orphan's overlap with its successor short for nothing. Before it
// exits it closes the destination sessions (closeSessions), giving them closeWait: an apply of the dead host
// may still hold one, and an orphan must not linger for it.
func exitWithParent(ppid int, closeSessions func() error) {
	for range time.Tick(100 * time.Millisecond) {
		if os.Getppid() != ppid {
			slog.Warn("host process is gone; exiting")
			done := make(chan error, 1)
			go func() { done <- closeSessions() }()
			select {
			case err := <-done:
				if err != nil {
					slog.Error("close destination sessions", "err", err)
				}
			case <-time.After(closeWait):
				slog.Warn("destination sessions did not close in time", "wait", closeWait)
			}
			os.Exit(2)
		}
	}
}

// closeWait bounds how long an orphaned plugin waits for its sessions to close before it exits.
const closeWait = 2 * time.Second
