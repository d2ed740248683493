package lakequery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/chzyer/readline"
	"golang.org/x/term"

	sdk "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// ErrNoSQL: `skippr query` was given no statement, neither as an argument nor on stdin.
var ErrNoSQL = errors.New("query: no SQL given (as an argument or on stdin)")

// Runner answers one statement; *Querier is the one `skippr query` uses.
type Runner interface {
	Run(ctx context.Context, req Request, out io.Writer) (string, error)
}

// Console is how `skippr query` talks to a person or a script: results on Out, everything else on Err.
type Console struct {
	Querier Runner
	Request Request   // format and source of every statement; SQL is filled per statement
	In      io.Reader // where statements come from when none is given as an argument
	Out     io.Writer
	Err     io.Writer
	History string // the prompt's history file
}

// Answer runs one statement: the result on Out, the summary (rows, time) on Err. A statement the engine
// refuses prints the engine's message (what is wrong, the known tables) on Err and returns sdk.ErrSQL alone,
// so that the caller's own message adds nothing to it; any other failure is returned as "query: …".
func (c *Console) Answer(ctx context.Context, sql string) error {
	req := c.Request
	req.SQL = sql
	summary, err := c.Querier.Run(ctx, req, c.Out)
	if errors.Is(err, sdk.ErrSQL) {
		fmt.Fprintln(c.Err, strings.TrimPrefix(err.Error(), sdk.ErrSQL.Error()+": "))
		return sdk.ErrSQL
	}
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	if summary != "" {
		fmt.Fprintln(c.Err, summary)
	}
	return nil
}

// Read answers what In holds: statements from a prompt with history when In is a terminal, else the one
// statement read up to EOF (ErrNoSQL when that is blank).
func (c *Console) Read(ctx context.Context) error {
	if f, ok := c.In.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return c.prompt(ctx)
	}
	sql, err := io.ReadAll(c.In)
	if err != nil {
		return fmt.Errorf("query: read SQL from stdin: %w", err)
	}
	if strings.TrimSpace(string(sql)) == "" {
		return ErrNoSQL
	}
	return c.Answer(ctx, string(sql))
}

const (
	promptFirst = "skippr> "
	promptMore  = "   ...> "
)

// prompt reads statements from a prompt with history until EOF or .quit. A failed statement prints its error
// and the prompt continues.
func (c *Console) prompt(ctx context.Context) error {
	rl, err := readline.NewEx(&readline.Config{
		Prompt:          promptFirst,
		HistoryFile:     c.History,
		InterruptPrompt: "^C",
		EOFPrompt:       ".quit",
		Stdout:          c.Out,
		Stderr:          c.Err,
	})
	if err != nil {
		return fmt.Errorf("query: prompt: %w", err)
	}
	defer rl.Close()
	source := "the lake plus the WAL's unapplied rows"
	if c.Request.AsOfLake {
		source = "the lake alone (--as-of-lake)"
	}
	fmt.Fprintf(c.Err, "skippr query: answers from %s. End statements with ';', .quit to leave.\n", source)
	var stmt statement
	for {
		line, err := rl.Readline()
		if errors.Is(err, readline.ErrInterrupt) {
			stmt.reset()
			rl.SetPrompt(promptFirst)
			continue
		}
		if err != nil { // io.EOF
			return nil
		}
		sql, done, quit := stmt.add(line)
		switch {
		case quit:
			return nil
		case !done:
			rl.SetPrompt(promptMore)
			continue
		}
		rl.SetPrompt(promptFirst)
		if err := c.Answer(ctx, sql); err != nil && !errors.Is(err, sdk.ErrSQL) { // Answer printed the engine's message already
			fmt.Fprintln(c.Err, "error:", err)
		}
	}
}

// statement gathers a prompt's lines until one ends with ';'.
type statement struct{ b strings.Builder }

// add takes one line. It returns the whole statement (its lines, each ending in a newline) once the line ends
// with ';', and quit for .quit, .exit or \q typed where a statement would start.
func (s *statement) add(line string) (sql string, done, quit bool) {
	t := strings.TrimSpace(line)
	if s.b.Len() == 0 && (t == ".quit" || t == ".exit" || t == `\q`) {
		return "", false, true
	}
	s.b.WriteString(line)
	s.b.WriteString("\n")
	if !strings.HasSuffix(t, ";") {
		return "", false, false
	}
	sql = s.b.String()
	s.reset()
	return sql, true, false
}

func (s *statement) reset() { s.b.Reset() }
