// Package cmdline holds the rules of skippr's command line that are not a command: the exit codes scripts
// rely on and how an error maps to one, and the usage checks urfave/cli does not make the way skippr wants
// (unknown commands and flags named with the closest real one, global flags accepted after a subcommand,
// missing required flags named all at once). cmd/skippr defines the commands and calls these; the rules live
// here so that they are tested without building the whole command tree.
package cmdline
