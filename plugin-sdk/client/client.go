package client

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// Config says how to start a plugin.
type Config struct {
	// Path is the plugin binary.
	Path string
	// SHA256 is the expected checksum of the binary; go-plugin refuses to start a binary that differs.
	// Nil starts it unverified (a local-path override); the caller says so in its log.
	SHA256 []byte
	// Env is the plugin's whole environment: the host's own is never passed on.
	Env []string
	// Protocols are the protocol versions the host speaks (default: protocol.Version).
	Protocols []int
	// StartTimeout bounds the handshake (default 60s).
	StartTimeout time.Duration
	// Logger receives the plugin's structured log lines; nil discards them (the stderr tail is kept anyway).
	Logger hclog.Logger
	// Stderr, if set, also receives the plugin's raw stderr.
	Stderr io.Writer
}

// Client is a running plugin process.
type Client struct {
	name string
	pc   *plugin.Client
	// killProc SIGKILLs the plugin's process (through os/exec, which knows when it was reaped, so it never
	// signals another process that reused the pid); a no-op once it has exited.
	killProc context.CancelFunc
	// sockDir is the private directory of the plugin's socket, removed with the plugin.
	sockDir string
	rpc     pluginv2.PluginClient
	tail    *tailBuffer
	// Protocol is the negotiated protocol version.
	Protocol int
}

// ErrProtocol is returned when host and plugin share no protocol version; the error is a *ProtocolError.
var ErrProtocol = errors.New("plugin protocol mismatch")

// ProtocolError is a plugin that shares no protocol version with the host. It names what the plugin says of
// itself when run with protocol.InfoFlag, so the caller can name a version that would work.
type ProtocolError struct {
	Binary  string // the binary's file name
	Name    string // the plugin's name, "" when it could not say (it predates protocol.InfoFlag)
	Version string // the plugin's version, "" likewise
	Offered []int  // the protocol versions the plugin offers; nil when it could not say
	Host    []int  // the protocol versions the host speaks
	Detail  string // go-plugin's own words
}

func (e *ProtocolError) Error() string {
	who := e.Binary
	if e.Name != "" {
		who = fmt.Sprintf("%s %s (%s)", e.Name, e.Version, e.Binary)
	}
	offers := fmt.Sprintf("offers protocol versions %v", e.Offered)
	if e.Offered == nil {
		offers = "does not say which protocol versions it offers (" + e.Detail + ")"
	}
	return fmt.Sprintf("%s: plugin %s %s, this engine speaks protocol versions %v", ErrProtocol, who, offers, e.Host)
}

func (e *ProtocolError) Unwrap() error { return ErrProtocol }

// pluginInfo runs a binary with protocol.InfoFlag. The binary's checksum was verified by the failed start
// that leads here.
func pluginInfo(ctx context.Context, cfg Config) (protocol.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.Path, protocol.InfoFlag)
	cmd.Env = append([]string{}, cfg.Env...)
	out, err := cmd.Output()
	if err != nil {
		return protocol.Info{}, fmt.Errorf("%s %s: %w", filepath.Base(cfg.Path), protocol.InfoFlag, err)
	}
	var info protocol.Info
	if err := json.Unmarshal(out, &info); err != nil {
		return protocol.Info{}, fmt.Errorf("%s %s: %w", filepath.Base(cfg.Path), protocol.InfoFlag, err)
	}
	return info, nil
}

// Start launches the plugin and completes the handshake.
func Start(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.Path == "" {
		return nil, errors.New("start plugin: no binary path")
	}
	if _, err := os.Stat(cfg.Path); err != nil {
		return nil, fmt.Errorf("start plugin: %w", err)
	}
	protos := cfg.Protocols
	if len(protos) == 0 {
		protos = []int{protocol.Version}
	}
	sets := map[int]plugin.PluginSet{}
	for _, v := range protos {
		sets[v] = plugin.PluginSet{protocol.PluginName: &protocol.GRPCPlugin{}}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	tail := newTailBuffer(16 << 10)
	var stderr io.Writer = tail
	if cfg.Stderr != nil {
		stderr = io.MultiWriter(tail, cfg.Stderr)
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	// The process is killed by os/exec when procCtx is cancelled, which happens only when ctx is cancelled
	// while the start is under way (below) or by KillNow. Not ctx itself: cancelling ctx (the engine's SIGTERM)
	// after the start would SIGKILL the plugin at once, before Kill's graceful shutdown reaches it.
	procCtx, killProc := context.WithCancel(context.Background())
	cmd := exec.CommandContext(procCtx, cfg.Path)
	// The plugin listens on a Unix socket in a directory only this user can enter (MkdirTemp: 0700), so no
	// other local user can connect to it. That is what go-plugin's AutoMTLS would guard, at the price of a
	// TLS layer on every byte of every batch both ways (about 0.05 µs of CPU per row of a MySQL snapshot,
	// see BENCHMARKS.md) and two P-521 key pairs per start. A process of the same user gains nothing from
	// the socket: it can already read both processes' memory.
	sweepSocketDirs(os.TempDir())
	sockDir, err := os.MkdirTemp("", socketDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		killProc()
		return nil, fmt.Errorf("start plugin: socket directory: %w", err)
	}
	cmd.Env = append(append([]string{}, cfg.Env...), plugin.EnvUnixSocketDir+"="+sockDir)
	dieWithHost(cmd)
	var secure *plugin.SecureConfig
	if cfg.SHA256 != nil {
		secure = &plugin.SecureConfig{Checksum: cfg.SHA256, Hash: sha256.New()}
	}
	hs := protocol.Handshake
	hs.ProtocolVersion = uint(protos[0])
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: sets,
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		SkipHostEnv:      true,
		StartTimeout:     timeout,
		Logger:           logger,
		Stderr:           stderr,
		// go-plugin sends what the plugin writes to os.Stderr after Serve over gRPC; keep it in the tail too.
		SyncStderr: stderr,
		GRPCDialOptions: append([]grpc.DialOption{grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(protocol.MaxMessageSize), grpc.MaxCallSendMsgSize(protocol.MaxMessageSize))},
			protocol.DialOptions()...),
	})
	name := filepath.Base(cfg.Path)
	c := &Client{name: name, pc: pc, killProc: killProc, sockDir: sockDir, tail: tail}
	// Not pc.Kill: go-plugin's Client.Start holds the client's lock for the whole start (hashing the binary
	// for SecureConfig, exec, waiting up to StartTimeout for the handshake line) and Kill takes that lock, so a
	// kill waited for the start to end. os/exec kills the process without that lock; go-plugin then sees it
	// exit and returns. Cancelled before the exec, the exec does not happen.
	stopWatch := context.AfterFunc(ctx, killProc)
	rpcClient, err := onStartThread(pc.Client) // go-plugin forks the plugin inside Client
	if !stopWatch() && err == nil {
		// ctx ended just as the handshake completed: the process is being killed, so this start failed.
		err = ctx.Err()
	}
	if err != nil {
		c.Kill()
		if ctx.Err() != nil {
			// go-plugin's own words would blame the binary ("Failed to read any lines …").
			return nil, fmt.Errorf("start plugin %s: stopped before its handshake: %w", name, context.Cause(ctx))
		}
		return nil, startError(ctx, cfg, name, protos, err, tail)
	}
	raw, err := rpcClient.Dispense(protocol.PluginName)
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("start plugin %s: %w%s", name, err, tail.suffix())
	}
	c.rpc, c.Protocol = raw.(pluginv2.PluginClient), pc.NegotiatedVersion()
	return c, nil
}

func startError(ctx context.Context, cfg Config, name string, protos []int, err error, tail *tailBuffer) error {
	msg := err.Error()
	switch {
	case strings.Contains(strings.ToLower(msg), "incompatible api version"):
		// go-plugin's message names one version the plugin offers ("Plugin version: N"); ask the binary for
		// all of them, and for its name and version.
		pe := &ProtocolError{Binary: name, Host: protos, Detail: msg}
		if info, ierr := pluginInfo(ctx, cfg); ierr == nil {
			pe.Name, pe.Version, pe.Offered = info.Name, info.Version, info.ProtocolVersions
		}
		return fmt.Errorf("start plugin %s: %w", name, pe)
	case strings.Contains(msg, "checksums did not match"):
		return fmt.Errorf("start plugin %s: refusing a binary whose SHA-256 differs from the pinned one (tampered or replaced?): %w", name, err)
	}
	return fmt.Errorf("start plugin %s: %w%s", name, err, tail.suffix())
}

// socketDirPrefix starts the name of a plugin's socket directory, then the engine's pid and a dash.
const socketDirPrefix = "skippr-plugin-"

// sweepSocketDirs removes, from dir, the socket directories of engines that are gone. A SIGKILLed engine
// cannot remove its own (its plugins die with it), so a crash loop would leave one per start behind; only the
// directories of pids that no longer run are taken, so a live engine's socket is never touched.
func sweepSocketDirs(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), socketDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() || !processGone(pid) {
			continue
		}
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// Name is the binary's file name.
func (c *Client) Name() string { return c.name }

// Exited reports whether the plugin process has ended.
func (c *Client) Exited() bool { return c.pc.Exited() }

// StderrTail returns the last lines the plugin wrote to stderr.
func (c *Client) StderrTail() string { return c.tail.String() }

// Kill ends the plugin process (gracefully first, then by force) and removes its socket's directory.
func (c *Client) Kill() {
	c.pc.Kill()
	c.killProc() // the process has exited: this only releases the context
	os.RemoveAll(c.sockDir)
}

// KillNow ends the plugin process at once (SIGKILL), without the graceful exit Kill asks for and waits up to
// 2 s for: for a hard stop, which waits for nothing the plugin has in flight. It then cleans up as Kill does.
func (c *Client) KillNow() {
	c.killProc()
	c.Kill()
}

// Pid is the plugin process id, for tests that kill it.
func (c *Client) Pid() int {
	if rc := c.pc.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Addr is where the plugin listens, for tests and diagnostics.
func (c *Client) Addr() net.Addr {
	if rc := c.pc.ReattachConfig(); rc != nil {
		return rc.Addr
	}
	return nil
}

// wrap adds the plugin's name, and its stderr tail when the process has died, to an RPC error.
func (c *Client) wrap(call string, err error) error {
	if err == nil {
		return nil
	}
	if c.pc != nil && c.pc.Exited() {
		return fmt.Errorf("plugin %s %s: process exited: %w%s", c.name, call, err, c.tail.suffix())
	}
	if st, ok := status.FromError(err); ok {
		return fmt.Errorf("plugin %s %s: %w", c.name, call, &RemoteError{Code: st.Code().String(), Message: st.Message(), err: fault.FromStatus(st)})
	}
	return fmt.Errorf("plugin %s %s: %w", c.name, call, err)
}

// RemoteError is an error the plugin returned. It unwraps to the plugin's fault class (see package fault), so
// errors.Is(err, fault.ErrConfig) works on it.
type RemoteError struct {
	Code    string
	Message string
	err     error
}

func (e *RemoteError) Error() string { return e.Message }
func (e *RemoteError) Unwrap() error { return e.err }

// tailBuffer keeps the last n bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func newTailBuffer(n int) *tailBuffer { return &tailBuffer{n: n} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.n {
		t.buf = append([]byte{}, t.buf[len(t.buf)-t.n:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func (t *tailBuffer) suffix() string {
	s := strings.TrimSpace(t.String())
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "\nplugin stderr (last lines):\n  " + strings.Join(lines, "\n  ")
}
