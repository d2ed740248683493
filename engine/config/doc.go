// Package config loads skippr.yml, the file that names the plugin registries skippr
// trusts, the connections (configured plugins) and the pipelines between them. This
// comment is the file's reference.
//
// # Example
//
//	registries:
//	  - url: file:///srv/skippr-registry
//	    keys: ["skippr-ed25519-public BASE64..."]
//	    key_files: [./keys/dev.pub]
//	connections:
//	  gen:
//	    plugin: datagen
//	    version: "~> 0.1"
//	    path: ./bin/skippr-plugin-datagen
//	    settings:
//	      rows: 1000
//	      password: ${PG_PASSWORD}
//	  sink:
//	    plugin: testdest
//	    version: ">= 0.1"
//	    settings: { dir: /tmp/out }
//	    apply: { max_interval: 0s, max_bytes: 256MiB }
//	pipelines:
//	  orders:
//	    source: gen
//	    destinations: [sink]
//	    streams: [orders, customers]
//	    delivery: exactly-once
//	    wal:
//	      url: file:///var/lib/skippr/wal/orders
//	      group_commit: { max_bytes: 8MiB, max_delay: 200ms }
//	      max_unapplied_bytes: 1GiB
//	    apply: { paused: false }
//
// # Top level
//
// Five keys, all optional: registries, connections, pipelines, metrics, query. Any other key is an
// error. An empty file (or one holding only comments) is a valid, empty config.
//
// # metrics
//
// A mapping with one key, addr: the host:port where `skippr sync` serves /metrics, /healthz and
// /readyz (docs/metrics.md); port 0 picks a free one. The --metrics-addr flag overrides it.
//
// # query
//
// A mapping with keys connection, server and server_token, all optional. connection: the connection
// whose plugin answers `skippr query` (any plugin offering the query.engine service, a third party's
// too). It must name a connection of the file; its settings are not used. Without it, `skippr query`
// takes the first connection whose plugin is duckdb (pinning its version or path), else the duckdb
// plugin itself. server: the address of a running `skippr serve` (host:port, grpc://host:port or
// grpc+tls://host:port) that answers `skippr query` instead of the plugins it would start (an
// unreachable one: it starts them, with a warning); server_token: the bearer token sent to it
// (usually ${ENV_VAR}), allowed only with server.
//
// # registries
//
// A list. Each registry has:
//
//   - url (required): a plain path or file: URL to a local registry, or an http:// or
//     https:// URL. Relative paths ("./registry", "file:registry") resolve against the
//     directory holding skippr.yml; the loaded URL is always file:///absolute/path for
//     local registries. The same registry may not be listed twice.
//   - keys: inline public keys, used as written.
//   - key_files: paths to public key files, relative to the config directory. They are
//     not read while loading.
//
// A registry needs at least one key, in keys or key_files.
//
// # connections
//
// A mapping from connection name to connection. Names (of connections and pipelines)
// start with a letter or digit and hold letters, digits, '-' and '_', at most 64 bytes.
// Each connection has:
//
//   - plugin (required): the plugin's name in a registry.
//   - version: a hashicorp/go-version constraint such as "~> 0.1" or ">= 0.1, < 1.0";
//     its syntax is checked here. Absent means any version. Quote it: YAML reads 0.1 as a
//     number (which is still accepted, as the constraint "0.1").
//   - path: a local plugin binary used instead of the registry, relative to the config
//     directory. It is not verified against any registry key.
//   - settings: a free-form mapping handed to the plugin as JSON (keys in file order),
//     checked against the plugin's JSON Schema by ValidateSettings. Absent means {}.
//     Values that JSON cannot carry (.inf, .nan, custom tags) are errors; timestamps stay
//     strings as written; !!binary stays base64 text.
//   - apply: { max_interval, max_bytes, max_entries }, for a connection used as a pipeline's
//     destination whose plugin takes a range of WAL entries in one commit (it offers coalesce;
//     iceberg, postgres, duckdb and testdest do). A destination that is behind gets every
//     committed entry it lacks, up to max_bytes of WAL (256MiB by default; the first entry
//     goes even when larger) and max_entries (default: no limit), in one transaction or
//     snapshot. max_interval (default 0s: apply at once) makes a destination that has caught
//     up wait until that long after its last apply began, unless a limit fills first: fewer,
//     larger commits for warehouses and fewer lake snapshots, at the cost of latency.
//     `sync --once` and a stop do not wait for it. A key left out takes the destination
//     plugin's proposal when it makes one (snowflake and bigquery propose max_interval 60s;
//     `skippr sync` logs each one it takes), else the default above; a key written out always
//     wins, so `max_interval: 0s` applies at once even into a warehouse. A destination whose
//     plugin does not coalesce gets one entry per apply whatever these say. apply on a
//     connection that is only ever a source is an error.
//
// # pipelines
//
// A mapping from pipeline name to pipeline; the order in the file is kept. Each pipeline
// has:
//
//   - source (required): a connection name.
//   - destinations (required): a list of one or more distinct connection names; the
//     singular `destination: name` is accepted instead (not both).
//   - streams: the streams to copy. Absent or empty means every stream the source
//     discovers.
//   - delivery: exactly-once (default) or at-least-once.
//   - wal (required): where the pipeline's write-ahead log lives; see below.
//   - apply: { paused: false } (default). paused: true stops handing committed batches to
//     destinations; the source keeps writing to the WAL until max_unapplied_bytes.
//
// Every name a pipeline uses must be a defined connection.
//
// # wal
//
//   - url (required): a plain path, a file: URL (file:///absolute/dir, file:relative/dir)
//     or s3://bucket/prefix. Relative file paths resolve against the config directory; a
//     file URL has no host (file://localhost/ is tolerated). There is deliberately no
//     default location: where the log lives decides what survives a crash. Two
//     pipelines may not share a WAL, nor nest one inside the other.
//   - s3: { endpoint, region, path_style } for s3:// URLs. endpoint is an http(s) URL
//     (e.g. http://127.0.0.1:9000 for MinIO); empty endpoint and region defer to the AWS
//     SDK's usual configuration chain; path_style defaults to false. It is checked even
//     next to a file URL, where it is unused.
//   - group_commit: { max_bytes: 8MiB, max_delay: 200ms } (the defaults). A commit starts
//     as soon as the source has checkpointed something and no commit is in flight; what
//     arrives meanwhile is made durable together in the next one, which gathers at most
//     max_bytes or max_delay before the source is held back. max_bytes must be positive.
//   - max_unapplied_bytes: 1GiB (default). The source is held back while more than this
//     many committed bytes wait to be applied. It must be at least group_commit.max_bytes.
//   - compression: s2 (default), zstd or none: the codec new WAL segments are written with.
//     S2 costs the engine the least CPU per row; zstd stores 1.6-3.5 times fewer bytes
//     (worth it for an S3 WAL on a slow or metered link, or to hold more rows within
//     max_unapplied_bytes, which counts stored bytes); none stores 4-5 times S2's bytes
//     and was not cheaper end to end. Changing it is safe at any time: every segment
//     names its own codec, and the WAL reads all of them (engine/wal, Segment).
//
// Sizes are a whole number with an optional unit: B, KiB, MiB, GiB or TiB ("8MiB",
// "8 MiB", "512"). Decimal units such as MB are refused rather than guessed. Durations
// use Go syntax: "200ms", "2s", "1m30s"; a bare number other than 0 needs a unit.
//
// Paths are never ~-expanded; a path starting with ~ is an error (write ${HOME}/...).
//
// # Environment variables
//
// Scalar values (never keys, never comments) may reference the environment:
//
//   - ${VAR} is the value of VAR. If VAR is unset, loading fails naming VAR and the key.
//     A variable set to the empty string gives "".
//   - ${VAR:-default} is the value of VAR, or default when VAR is unset or empty. The
//     default is literal text up to the first '}': it is not itself interpolated.
//   - $${ is a literal ${. Any other $ is literal: "$5", "$$", "$x" stay as written.
//   - Variable names are letters, digits and '_', not starting with a digit.
//   - Substituted text is not scanned again.
//
// A plain ${VAR} or ${VAR:-default} works inside a flow collection too
// (`settings: { dir: ${OUT_DIR} }`): before parsing, the braces, commas and brackets of a
// reference are swapped for placeholder runes that YAML does not treat as flow indicators,
// and put back in every scalar afterwards. A default holding quotes, braces or # is left
// as written (quote such a value).
//
// Types: a plain (unquoted) value containing a reference is typed after substitution by
// JSON's rules: true and false are booleans, null is null, text matching JSON's number
// grammar is a number, anything else is a string. So `port: ${PORT}` with PORT=5432 is
// the number 5432, but PIN=0123 stays the string "0123". A quoted value ("${PIN}") is
// always a string, and an explicit tag (!!str ${PIN}) always wins. Quote secrets that
// might look like numbers: password: "${PG_PASSWORD}".
//
// Secrets: every value holding a reference is treated as secret, even when a default was
// used. Settings rendered for people (Settings.String, fmt's %v, slog, json.Marshal)
// show it as <redacted>; only Connection.SettingsJSON and Settings.Map carry the real
// value, for the plugin. Errors never quote such values: they say `the value of
// "${VAR}"` instead.
//
// # YAML
//
// One document per file. Anchors, aliases and merge keys (<<) work; keys set next to a
// merge override merged ones, and merged keys report the position where the anchor wrote
// them. A key given twice in one mapping is an error, as is an alias inside the
// collection it names, or settings that aliases expand beyond 100,000 values.
//
// # Errors
//
// Load reports every problem it finds at once (errors.Join of *Error), in file order,
// each as file:line:column: key.path: message:
//
//	skippr.yml:14:5: pipelines.orders.delivery: "exactly-twice" is not one of exactly-once, at-least-once
//	skippr.yml:6:3: connections.gen: missing required key "plugin"
//	skippr.yml:9:5: pipelines.orders.colour: unknown key (want one of: source, ...)
//
// The position is that of the key (or, in a list, of the item); a missing key is reported
// at its parent. Key paths index lists as [i] and quote keys that are not plain words:
// connections.gen.settings["a.b"].tables[2].name. YAML syntax errors carry yaml.v3's own
// line number, which for some errors is that of the enclosing block rather than the
// offending line. Config.Pos gives the position of any key in a loaded file.
//
// # Plugin settings schema
//
// ValidateSettings checks a connection's settings against the JSON Schema a plugin
// publishes. The schema's "$schema" picks the draft (draft-07 and 2020-12 both work);
// without one, 2020-12 applies. Format keywords are asserted as the draft says (draft-07:
// yes, 2020-12: no). The schema must be self-contained: references to other documents are
// not fetched. Each violation is reported at the setting it concerns, e.g.
//
//	skippr.yml:9:7: connections.gen.settings.rows: must be >= 1
//	skippr.yml:12:11: connections.gen.settings.tables[1]: missing required setting "name"
//
// Where a value must match one of several alternatives (anyOf, oneOf), every failing
// alternative's complaint is listed.
package config
