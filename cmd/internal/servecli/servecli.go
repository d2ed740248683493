// Package servecli is the command line of `skippr serve`, shared by the two binaries that take part: the core
// (`skippr serve` parses these flags, so its --help and usage errors are the core's, then execs the companion)
// and the companion skippr-serve, which runs the Flight SQL server (engine/queryserve).
//
// Why two binaries: the core stays under 25,000,000 bytes static and stripped (issue #20), and gRPC's server
// side, Arrow Flight and Flight SQL add ≈ 3 MB to it (23.4 → 26.45 MB measured; Flight alone with a bare
// gRPC server, without Flight SQL, already 25.8 MB). The companion is the same engine packages plus the server;
// it ships beside the core in the release archive. This package imports no Flight code, so the core does not
// link it.
package servecli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"
)

// Name and usage of the command.
const (
	Name  = "serve"
	Usage = "answer SQL over the lake tables plus the WAL's rows as an Arrow Flight SQL server"
	// Companion is the binary that serves, looked up beside the core, then in PATH.
	Companion = "skippr-serve"
)

// Description is the command's help text.
const Description = `Serves what skippr query answers — the pipelines' Iceberg tables merged with the entries committed to each
pipeline's WAL but not applied yet — to Arrow Flight SQL clients (ADBC, JDBC, pyarrow.flight, the Go client),
with results streamed as Arrow record batches. The lake and query engine plugins start once and serve every
client. Each statement sees the WAL entries committed before it started. Read-only: no WAL lease, never
blocks a running sync, and the query engine refuses SQL that writes files, attaches databases, installs
extensions or reads files or URLs the lake does not name.

Listens on 127.0.0.1:31337 unless --addr says otherwise; an address other hosts can reach needs tokens. Each
client gets a bearer token from an environment variable: --token analyst=ANALYST_TOKEN reads $ANALYST_TOKEN,
and the client sends "authorization: Bearer <token>" (the log names the client, never the token).
--tls-cert and --tls-key serve TLS, re-reading renewed files at the next connection; --tls-client-ca makes
it mutual: each client presents a certificate one of those CAs signed (enough on its own for another host's
address; the log names the client by its certificate's common name).

Each statement may run for --query-timeout (then DEADLINE_EXCEEDED) and use --query-memory in the query
engine (what cannot spill beyond it fails with RESOURCE_EXHAUSTED); at most --max-concurrent run at once.
A client that cancels its call stops its query. SIGINT/SIGTERM lets running calls finish for a few seconds.

For agents, the same tables as Model Context Protocol tools (list_tables, describe_table, query with a row
limit): --mcp-addr serves them over streamable HTTP beside Flight SQL, --mcp-stdio on stdin/stdout instead.

The server is the companion binary skippr-serve, shipped beside skippr (it keeps the core small); skippr
serve runs it with these flags.`

// Flags are the command's flags.
func Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "addr", Value: "127.0.0.1:31337", Usage: "host:port to listen on (port 0: any free port, logged at start)"},
		&cli.StringSliceFlag{Name: "token", Usage: "CLIENT=ENV_VAR: the client named CLIENT authenticates with the bearer token in $ENV_VAR (repeat for each client)"},
		&cli.StringFlag{Name: "tls-cert", Usage: "PEM certificate (chain) to serve TLS with"},
		&cli.StringFlag{Name: "tls-key", Usage: "PEM private key of --tls-cert"},
		&cli.StringFlag{Name: "tls-client-ca", Usage: "PEM CA certificate(s): every client must present a certificate one of them signed (mutual TLS; re-read when the file changes)"},
		&cli.DurationFlag{Name: "query-timeout", Value: 60 * time.Second, Usage: "longest a statement may run (0: no limit)"},
		&cli.StringFlag{Name: "query-memory", Value: "2GB", Usage: "memory the query engine may use per statement (DuckDB's notation: 512MB, 4GB); beyond it, what cannot spill to disk fails the statement"},
		&cli.IntFlag{Name: "max-concurrent", Value: 4, Usage: "statements running at once; more wait for a free slot"},
		&cli.StringFlag{Name: "mcp-addr", Usage: "also serve the MCP tools (list_tables, describe_table, query) over streamable HTTP on host:port, path /mcp (same tokens and TLS)"},
		&cli.BoolFlag{Name: "mcp-stdio", Usage: "serve the MCP tools on stdin/stdout for a local agent, instead of Flight SQL"},
		&cli.StringSliceFlag{Name: "pipeline", Usage: "only these pipelines' lakes (default: every pipeline with an iceberg destination)"},
		&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
	}
}

// Args are the flags c was given, as arguments for the companion (flags left at their default are left out).
func Args(c *cli.Command) []string {
	var out []string
	for _, f := range Flags() {
		name := f.Names()[0]
		if !c.IsSet(name) {
			continue
		}
		switch f.(type) {
		case *cli.StringSliceFlag:
			for _, v := range c.StringSlice(name) {
				out = append(out, "--"+name+"="+v)
			}
		case *cli.DurationFlag:
			out = append(out, "--"+name+"="+c.Duration(name).String())
		case *cli.IntFlag:
			out = append(out, fmt.Sprintf("--%s=%d", name, c.Int(name)))
		case *cli.BoolFlag:
			out = append(out, fmt.Sprintf("--%s=%t", name, c.Bool(name)))
		default:
			out = append(out, "--"+name+"="+c.String(name))
		}
	}
	return out
}

// Exec replaces this process with the companion (found beside this executable, else in PATH), running it with
// args and env; it returns only when that fails.
func Exec(args, env []string) error {
	bin, err := companion()
	if err != nil {
		return err
	}
	return fmt.Errorf("serve: run %s: %w", bin, syscall.Exec(bin, append([]string{bin}, args...), env))
}

// companion finds skippr-serve beside this executable, else in PATH.
func companion() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), Companion)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	p, err := exec.LookPath(Companion)
	if errors.Is(err, exec.ErrNotFound) {
		return "", fmt.Errorf("serve: the Flight SQL server is the companion binary %s, which is neither beside this skippr nor in PATH: install it from the same release archive (make build puts it in bin/)", Companion)
	}
	return p, err
}
