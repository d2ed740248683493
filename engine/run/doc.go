// Package run turns a loaded config.Config into running pipelines: it starts each pipeline's plugins through
// engine/connector, checks them (engine/precheck), opens and acquires the WAL, runs engine/pipeline under
// engine/supervise, and keeps the pipeline's state directory. Both `skippr sync` and `skippr worker`
// (engine/fleet, through Runner.Run) run pipelines here.
//
// # State directory
//
// Each pipeline has one directory on this host, keyed by its name and WAL location so that two configs with a
// pipeline of the same name keep their own figures (State):
//
//	$SKIPPR_HOME/state/<pipeline>-<first 6 bytes of sha256(wal url), hex>/status.json   the last status
//	$SKIPPR_HOME/state/<pipeline>-<…>/resnapshot/                                       re-snapshot requests
//	$SKIPPR_HOME/state/<pipeline>/status.json          the status of releases before the WAL-keyed name (read only)
//
// status.json is advisory: it is replaced atomically (write, rename) without fsync, and every figure in it is
// also derivable from the WAL and the destinations. A pipeline is running when its status names a live
// process and a state other than stopped or failed (Running): `skippr status` and `skippr teardown` use that
// one rule.
//
// # What the commands ask
//
// Besides running pipelines, run answers what `skippr` asks of a config without running it: the plugin host
// and registry client for it (NewHost, RegistryClient, Registries), each pipeline's status (StatusOf, with
// Statuses.WriteText for people), teardown, re-snapshot requests, the summary of `sync --once`, a connection's
// check (Check), and the fleet's view of the pipelines (FleetPipelines, FleetProgress). The CLI parses flags,
// calls these and prints; it holds no rule of its own.
//
// # The start's log
//
// Each run of a pipeline logs "pipeline started" with the end of each start phase as milliseconds since the
// command began (Runner.Started; else since the run began): run_ms, plugins_ms (all plugins, started at once),
// checks_ms, wal_ms, and each plugin's own steps (plugin.<connection>.resolve_ms, exec_ms, spec_ms); then
// "first row read" with first_row_ms once the source's first batch arrives (startlog.go). `go run ./bench
// -start-only` reads them with --log-format json.
//
// # Errors
//
// Errors a person must act on carry a Code (CodeOf): the CLI maps it to its exit code, and the supervisor
// fails such a pipeline at once instead of retrying it.
package run
