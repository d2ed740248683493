package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/hashicorp/go-version"
	"gopkg.in/yaml.v3"

	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/internal/suggest"
)

// Load reads and checks a skippr.yml. env looks variables up for ${…} interpolation; pass
// os.LookupEnv in production. A nil env treats every variable as unset.
//
// All problems found are returned together (errors.Join of *Error), in file order.
func Load(path string, env func(string) (string, bool)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data, env)
}

// Parse is Load for a file already read: path names the file in errors and anchors
// relative paths.
func Parse(path string, data []byte, env func(string) (string, bool)) (*Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	root, err := parseYAML(path, data)
	if err != nil {
		return nil, err
	}
	secrets := map[string]string{}
	l := &loader{
		file: path,
		dir:  filepath.Dir(abs),
		env: func(name string) (string, bool) {
			v, ok := lookup(env, name)
			if ok && v != "" {
				secrets[name] = v
			}
			return v, ok
		},
		pos:    map[string]Pos{},
		active: map[*yaml.Node]bool{},
	}
	cfg := l.config(root)
	if err := l.result(); err != nil {
		return nil, err
	}
	cfg.secrets = secrets
	return cfg, nil
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

func (l *loader) checkName(e entry, what string) {
	if len(e.key) > 64 || !namePattern.MatchString(e.key) {
		l.errorf(e.pos, e.path, "%s name %q must start with a letter or digit and hold only letters, digits, '-' and '_' (at most 64)", what, e.key)
	}
}

func (l *loader) config(root *yaml.Node) *Config {
	cfg := &Config{Path: l.file, Dir: l.dir, pos: l.pos}
	if root == nil {
		return cfg
	}
	top := l.object(root, "", l.at(root), "registries", "connections", "pipelines", "metrics", "query")
	if e, ok := top.get("metrics"); ok {
		l.metrics(&cfg.Metrics, e)
	}
	if e, ok := top.get("registries"); ok {
		cfg.Registries = l.registries(e)
	}
	connsOK := true
	if e, ok := top.get("connections"); ok {
		cfg.Connections, connsOK = l.connections(e)
	}
	if e, ok := top.get("pipelines"); ok {
		cfg.Pipelines = l.pipelines(e, cfg, connsOK)
	}
	if e, ok := top.get("query"); ok {
		l.query(&cfg.Query, e, cfg, connsOK)
	}
	l.checkWALOverlap(cfg)
	l.checkApplyUse(cfg)
	return cfg
}

// metrics reads `metrics: {addr: host:port}`; the address is checked when the server listens.
func (l *loader) metrics(m *MetricsConfig, e entry) {
	m.Pos = e.pos
	o := l.object(e.val, e.path, e.pos, "addr")
	if !o.ok {
		return
	}
	if addr, _, ae, ok := o.str("addr"); ok {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			l.errorf(ae.pos, ae.path, "%q is not host:port (for example 127.0.0.1:9464): %v", addr, err)
			return
		}
		m.Addr = addr
	}
}

// query reads `query: {connection: NAME, server: ADDR, server_token: TOKEN}`. connection must name a
// connection of the file; that its plugin offers query.engine is checked when `skippr query` starts it.
// server is host:port, optionally behind grpc:// or grpc+tls://; that it answers is checked when
// `skippr query` calls it.
func (l *loader) query(q *QueryConfig, e entry, cfg *Config, connsOK bool) {
	q.Pos = e.pos
	o := l.object(e.val, e.path, e.pos, "connection", "server", "server_token")
	if !o.ok {
		return
	}
	if _, ok := o.get("connection"); ok {
		if name, s, ce, ok := o.needStr("connection"); ok {
			q.Connection = name
			if connsOK {
				l.checkConnection(cfg, name, s, ce)
			}
		}
	}
	if _, ok := o.get("server"); ok {
		if addr, _, se, ok := o.needStr("server"); ok {
			hostPort := strings.TrimPrefix(strings.TrimPrefix(addr, "grpc+tls://"), "grpc://")
			if _, _, err := net.SplitHostPort(hostPort); err != nil {
				l.errorf(se.pos, se.path, "%q is not host:port, grpc://host:port or grpc+tls://host:port (for example 127.0.0.1:31337, where skippr serve listens): %v", addr, err)
			} else {
				q.Server = addr
			}
		}
	}
	if tok, _, te, ok := o.str("server_token"); ok {
		if q.ServerToken = tok; tok != "" && q.Server == "" {
			l.errorf(te.pos, te.path, "is set but query.server is not: the token is for the server skippr query talks to")
		}
	}
}

func (l *loader) registries(e entry) []*Registry {
	items, _ := l.list(e, "a list of registries")
	var out []*Registry
	first := map[string]entry{}
	for _, it := range items {
		o := l.object(it.val, it.path, it.pos, "url", "keys", "key_files")
		r := &Registry{Pos: it.pos}
		out = append(out, r)
		if !o.ok {
			continue
		}
		if text, s, ue, ok := o.needStr("url"); ok {
			loc, err := l.parseLocation(text)
			switch {
			case err != nil:
				l.errorf(ue.pos, ue.path, "%s: %v", s.show(), s.redact(err))
			case loc.scheme == "http" || loc.scheme == "https":
				if loc.u.Host == "" {
					l.errorf(ue.pos, ue.path, "%s has no host", s.show())
				}
				r.URL = loc.url
			case loc.scheme == walSchemeFile:
				r.URL = loc.url
			default:
				l.errorf(ue.pos, ue.path, "%s: unsupported scheme%s (want file, http or https, or a plain path)", s.show(), s.detail(" %q", loc.scheme))
			}
			if f, dup := first[r.URL]; dup && r.URL != "" {
				l.errorf(ue.pos, ue.path, "registry %s is listed twice (first at %s)", s.show(), f.path)
			} else {
				first[r.URL] = ue
			}
		}
		r.Keys, _, _ = o.stringList("keys", "a list of public keys")
		files, fileItems, _ := o.stringList("key_files", "a list of key file paths")
		for i, f := range files {
			p, err := l.resolvePath(f)
			if err != nil {
				l.errorf(fileItems[i].pos, fileItems[i].path, "%v", err)
				continue
			}
			r.KeyFiles = append(r.KeyFiles, p)
		}
		if len(r.Keys)+len(r.KeyFiles) == 0 && !l.hasErrorAt(joinKey(it.path, "keys")) && !l.hasErrorAt(joinKey(it.path, "key_files")) {
			l.errorf(it.pos, it.path, "needs at least one public key in keys or key_files")
		}
	}
	return out
}

// connections returns the connections in file order; ok is false when the section
// itself is broken, so pipelines need not report every reference as unknown.
func (l *loader) connections(e entry) ([]*Connection, bool) {
	if e.val.Kind != yaml.MappingNode {
		l.errorf(e.pos, e.path, "want a mapping of connection names to connections; got %s", describe(e.val))
		return nil, false
	}
	var out []*Connection
	for _, ce := range l.entries(e.val, e.path) {
		l.checkName(ce, "connection")
		c := &Connection{Name: ce.key, Pos: ce.pos}
		out = append(out, c)
		o := l.object(ce.val, ce.path, ce.pos, "plugin", "version", "path", "settings", "apply")
		if plugin, s, pe, ok := o.needStr("plugin"); ok {
			if !pluginName.MatchString(plugin) {
				l.errorf(pe.pos, pe.path, "%s is not a plugin name (letters, digits, '.', '-' and '_')", s.show())
			}
			c.Plugin = plugin
		}
		if v, s, ve, ok := o.str("version"); ok {
			cs, err := version.NewConstraint(v)
			if err != nil {
				l.errorf(ve.pos, ve.path, "%s is not a version constraint (examples: \"~> 0.1\", \">= 0.1, < 1.0\")", s.show())
			} else {
				c.Version, c.Constraints = strings.TrimSpace(v), cs
			}
		}
		if p, _, pe, ok := o.str("path"); ok {
			abs, err := l.resolvePath(p)
			if err != nil {
				l.errorf(pe.pos, pe.path, "%v", err)
			}
			c.Path = abs
		}
		c.Settings = l.settings(o, c, ce.path)
		c.Apply = ApplyLimits{MaxBytes: DefaultApplyMaxBytes, Unset: ApplyKeys{MaxInterval: true, MaxBytes: true, MaxEntries: true}, Pos: ce.pos}
		if ae, ok := o.get("apply"); ok {
			l.applyLimits(&c.Apply, ae)
		}
	}
	return out, true
}

// applyLimits reads a connection's `apply: {max_interval, max_bytes, max_entries}`.
func (l *loader) applyLimits(a *ApplyLimits, e entry) {
	a.Pos = e.pos
	o := l.object(e.val, e.path, e.pos, "max_interval", "max_bytes", "max_entries")
	if d, _, ok := o.duration("max_interval"); ok {
		a.MaxInterval, a.Unset.MaxInterval = d, false
	}
	if n, _, ok := o.size("max_bytes"); ok {
		a.MaxBytes, a.Unset.MaxBytes = n, false
	}
	if n, _, ok := o.count("max_entries"); ok {
		a.MaxEntries, a.Unset.MaxEntries = n, false
	}
}

// checkApplyUse refuses `apply:` on a connection that no pipeline applies to: it would be silently unused.
func (l *loader) checkApplyUse(cfg *Config) {
	for _, c := range cfg.Connections {
		path := joinKey(joinKey("connections", c.Name), "apply")
		if _, set := l.pos[path]; !set {
			continue
		}
		var source string
		dest := false
		for _, p := range cfg.Pipelines {
			if p.Source == c.Name && source == "" {
				source = p.Name
			}
			for _, d := range p.Destinations {
				dest = dest || d == c.Name
			}
		}
		if source != "" && !dest {
			l.errorf(c.Apply.Pos, path, "connection %s is the source of pipeline %s and no pipeline's destination; apply limits only destinations: remove apply", c.Name, source)
		}
	}
}

var pluginName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func (l *loader) settings(o *object, c *Connection, connPath string) Settings {
	path := joinKey(connPath, "settings")
	empty := Settings{root: &setting{kind: kindMap, pos: c.Pos, path: path, fields: map[string]*setting{}}}
	e, ok := o.get("settings")
	if !ok {
		return empty
	}
	if e.val.Kind != yaml.MappingNode {
		l.errorf(e.pos, e.path, "want a mapping of plugin settings; got %s", describe(e.val))
		return empty
	}
	return Settings{root: l.value(e.val, e.path, e.pos)}
}

// value converts a settings subtree, interpolating its scalars.
func (l *loader) value(n *yaml.Node, path string, pos Pos) *setting {
	s := &setting{kind: kindScalar, pos: pos, path: path}
	if l.values++; l.values > maxSettingsValues {
		if l.values == maxSettingsValues+1 {
			l.errorf(pos, path, "settings expand to more than %d values through aliases", maxSettingsValues)
		}
		return s
	}
	switch n.Kind {
	case yaml.MappingNode:
		s.kind, s.fields = kindMap, map[string]*setting{}
		for _, e := range l.entries(n, path) {
			s.keys = append(s.keys, e.key)
			s.fields[e.key] = l.value(e.val, e.path, e.pos)
		}
	case yaml.SequenceNode:
		s.kind = kindList
		if l.active[n] {
			l.errorf(pos, path, "an alias refers to a list that contains it")
			return s
		}
		l.active[n] = true
		defer delete(l.active, n)
		items, _ := l.list(entry{path: path, pos: pos, val: n}, "a list")
		for _, it := range items {
			s.items = append(s.items, l.value(it.val, it.path, it.pos))
		}
	default:
		sc, ok := l.scalar(entry{path: path, pos: pos, val: n}, "a value")
		if !ok {
			return s
		}
		v, err := settingValue(sc)
		if err != nil {
			l.errorf(pos, path, "%v", err)
		}
		s.scalar, s.secret = v, sc.secret
	}
	return s
}

func (l *loader) pipelines(e entry, cfg *Config, connsOK bool) []*Pipeline {
	if e.val.Kind != yaml.MappingNode {
		l.errorf(e.pos, e.path, "want a mapping of pipeline names to pipelines; got %s", describe(e.val))
		return nil
	}
	var out []*Pipeline
	for _, pe := range l.entries(e.val, e.path) {
		l.checkName(pe, "pipeline")
		p := &Pipeline{Name: pe.key, Pos: pe.pos, Delivery: DefaultDelivery}
		out = append(out, p)
		o := l.object(pe.val, pe.path, pe.pos,
			"source", "destinations", "destination", "streams", "delivery", "wal", "apply", "fleet")
		if !o.ok {
			continue
		}
		ref := func(name string, s scalar, at entry) {
			if connsOK {
				l.checkConnection(cfg, name, s, at)
			}
		}
		if src, s, se, ok := o.needStr("source"); ok {
			p.Source = src
			ref(src, s, se)
		}
		l.destinations(o, p, ref)
		p.Streams, _, _ = o.stringList("streams", "a list of stream names")
		if d, s, de, ok := o.str("delivery"); ok {
			switch Delivery(d) {
			case ExactlyOnce, AtLeastOnce:
				p.Delivery = Delivery(d)
			default:
				l.errorf(de.pos, de.path, "%s is not one of %s, %s", s.show(), ExactlyOnce, AtLeastOnce)
			}
		}
		if we, ok := o.need("wal"); ok {
			l.wal(&p.WAL, we)
		}
		ao := l.object(o.by["apply"].val, joinKey(pe.path, "apply"), o.by["apply"].pos, "paused")
		p.Apply.Paused, _, _ = ao.boolean("paused")
		fo := l.object(o.by["fleet"].val, joinKey(pe.path, "fleet"), o.by["fleet"].pos, "pin")
		p.Fleet.Pin, _, _, _ = fo.str("pin")
	}
	return out
}

// destinations reads `destinations: [a, b]` or the singular `destination: a`.
func (l *loader) destinations(o *object, p *Pipeline, ref func(string, scalar, entry)) {
	one, hasOne := o.by["destination"]
	many, hasMany := o.by["destinations"]
	switch {
	case hasOne && hasMany:
		l.errorf(one.pos, one.path, "use destination or destinations, not both")
	case hasMany:
		names, items, _ := o.stringList("destinations", "a list of connection names")
		if len(names) == 0 && !l.hasErrorAt(many.path) {
			l.errorf(many.pos, many.path, "needs at least one connection name")
		}
		for i, n := range names {
			ref(n, items[i].s, items[i].entry)
		}
		p.Destinations = names
	case hasOne:
		if name, s, e, ok := o.needStr("destination"); ok {
			ref(name, s, e)
			p.Destinations = []string{name}
		}
	default:
		o.need("destinations")
	}
}

// hasErrorAt reports whether an error was already recorded under path, so a summary
// error does not pile onto specific ones.
func (l *loader) hasErrorAt(path string) bool {
	for _, e := range l.errs {
		if e.Key == path || strings.HasPrefix(e.Key, path+"[") {
			return true
		}
	}
	return false
}

func (l *loader) checkConnection(cfg *Config, name string, s scalar, at entry) {
	if _, ok := cfg.Connection(name); ok {
		return
	}
	what := "unknown connection " + s.show()
	if s.secret {
		what = s.show() + " names no connection"
	}
	known := cfg.ConnectionNames()
	if len(known) == 0 {
		l.errorf(at.pos, at.path, "%s (no connections are defined)", what)
		return
	}
	if m := suggest.Closest(name, known); m != "" && !s.secret {
		what += fmt.Sprintf("; did you mean %q?", m)
	}
	l.errorf(at.pos, at.path, "%s (known: %s)", what, strings.Join(known, ", "))
}

func (l *loader) wal(w *WALConfig, e entry) {
	w.Pos = e.pos
	w.GroupCommit = GroupCommit{MaxBytes: DefaultGroupCommitMaxBytes, MaxDelay: DefaultGroupCommitMaxDelay}
	w.MaxUnappliedBytes = DefaultMaxUnappliedBytes
	w.Compression = wal.DefaultCompression.String()
	o := l.object(e.val, e.path, e.pos, "url", "s3", "group_commit", "max_unapplied_bytes", "compression")
	if !o.ok {
		return
	}
	if text, s, ue, ok := o.needStr("url"); ok {
		loc, err := l.parseLocation(text)
		switch {
		case err != nil:
			l.errorf(ue.pos, ue.path, "%s: %v", s.show(), s.redact(err))
		case loc.scheme == walSchemeFile:
			w.URL, w.Scheme, w.Dir = loc.url, walSchemeFile, loc.dir
		case loc.scheme == walSchemeS3:
			bucket, prefix, err := s3Location(loc.u)
			if err != nil {
				l.errorf(ue.pos, ue.path, "%s: %v", s.show(), s.redact(err))
				break
			}
			w.Scheme, w.Bucket, w.Prefix = walSchemeS3, bucket, prefix
			w.URL = "s3://" + bucket
			if prefix != "" {
				w.URL += "/" + prefix
			}
		default:
			l.errorf(ue.pos, ue.path, "%s: unsupported scheme%s (want file:// or s3://, or a plain path)", s.show(), s.detail(" %q", loc.scheme))
		}
	}
	// s3 is checked even next to a file URL (where it is unused) so that switching the
	// url to s3:// later does not reveal old mistakes.
	if se, ok := o.get("s3"); ok {
		so := l.object(se.val, se.path, se.pos, "endpoint", "region", "path_style")
		if ep, s, epe, ok := so.str("endpoint"); ok {
			loc, err := l.parseLocation(ep)
			switch {
			case err != nil:
				l.errorf(epe.pos, epe.path, "%s: %v", s.show(), s.redact(err))
			case (loc.scheme != "http" && loc.scheme != "https") || loc.u.Host == "":
				l.errorf(epe.pos, epe.path, "%s is not an http:// or https:// URL with a host", s.show())
			default:
				w.S3.Endpoint = loc.url
			}
		}
		w.S3.Region, _, _, _ = so.str("region")
		w.S3.PathStyle, _, _ = so.boolean("path_style")
	}
	if c, s, ce, ok := o.str("compression"); ok {
		if _, err := wal.ParseCompression(c); err != nil {
			l.errorf(ce.pos, ce.path, "%s is not one of %s", s.show(), strings.Join(wal.CompressionNames(), ", "))
		} else {
			w.Compression = c
		}
	}
	gce := o.by["group_commit"]
	gc := l.object(gce.val, gce.path, gce.pos, "max_bytes", "max_delay")
	maxBytes, mbe, mbSet := gc.size("max_bytes")
	if mbSet {
		w.GroupCommit.MaxBytes = maxBytes
	}
	if d, _, ok := gc.duration("max_delay"); ok {
		w.GroupCommit.MaxDelay = d
	}
	mu, mue, muSet := o.size("max_unapplied_bytes")
	if muSet {
		w.MaxUnappliedBytes = mu
	}
	if w.MaxUnappliedBytes < w.GroupCommit.MaxBytes {
		at := mue
		if !muSet {
			at = mbe
		}
		l.errorf(at.pos, at.path, "max_unapplied_bytes (%d) must be at least group_commit.max_bytes (%d)",
			w.MaxUnappliedBytes, w.GroupCommit.MaxBytes)
	}
}

// checkWALOverlap refuses two pipelines whose WALs share a directory or prefix: each WAL
// assumes it is the only writer.
func (l *loader) checkWALOverlap(cfg *Config) {
	type claim struct {
		key  string
		path string
		pos  Pos
	}
	var claims []claim
	for _, p := range cfg.Pipelines {
		var key string
		switch p.WAL.Scheme {
		case walSchemeFile:
			key = "file:" + filepath.ToSlash(p.WAL.Dir) + "/"
		case walSchemeS3:
			key = "s3:" + p.WAL.Bucket + "/" + p.WAL.Prefix
			if p.WAL.Prefix != "" {
				key += "/"
			}
		default:
			continue
		}
		path := joinKey(joinKey(joinKey("pipelines", p.Name), "wal"), "url")
		c := claim{key: key, path: path, pos: l.pos[path]}
		for _, prev := range claims {
			if strings.HasPrefix(c.key, prev.key) || strings.HasPrefix(prev.key, c.key) {
				l.errorf(c.pos, c.path, "WAL location overlaps %s (%s); every pipeline needs its own WAL", prev.path, prev.pos)
			}
		}
		claims = append(claims, c)
	}
}
