package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/registry"
)

// Described is what `skippr plugin info` prints: the registry's listing of a plugin and the settings schema of
// the newest version this engine runs. SettingsError says why the schema is missing (no version speaks the
// engine's protocol, a download or checksum failure, …): the listing is worth showing without it.
type Described struct {
	registry.PluginVersions
	Settings      *SettingsDoc `json:"settings,omitempty"`
	SettingsError string       `json:"settings_error,omitempty"`
}

// Describe adds to a registry listing the settings schema, asking the plugin (DescribeSettings).
func Describe(ctx context.Context, inst pluginhost.Installer, listing registry.PluginVersions, log *slog.Logger) Described {
	out := Described{PluginVersions: listing}
	doc, err := DescribeSettings(ctx, inst, listing.Name, log)
	if err != nil {
		out.SettingsError = err.Error()
		return out
	}
	out.Settings = &doc
	return out
}

// WriteText prints the listing, then the settings (or why they are missing).
func (d Described) WriteText(w io.Writer, protocols []int) error {
	if err := d.PluginVersions.WriteText(w, protocols); err != nil {
		return err
	}
	if d.Settings == nil {
		_, err := fmt.Fprintf(w, "\nsettings: unknown (%s)\n", d.SettingsError)
		return err
	}
	return d.Settings.WriteText(w)
}

// SettingsDoc is the settings schema of one plugin version, as the plugin itself reports it in its Spec.
type SettingsDoc struct {
	Plugin  string          `json:"plugin"`
	Version string          `json:"version"`
	Schema  json.RawMessage `json:"settings_schema"`
}

// DescribeSettings installs (or finds) the newest version of plugin that this engine can run, verified as a
// sync verifies it, starts it and asks its Spec for the settings schema. A registry index holds no schemas:
// only the binary knows its own. The pin goes into a throwaway lock file, so a project's skippr.lock is never
// changed by looking; the binary stays in the plugin cache, where a later install finds it.
func DescribeSettings(ctx context.Context, inst pluginhost.Installer, plugin string, log *slog.Logger) (SettingsDoc, error) {
	dir, err := os.MkdirTemp("", "skippr-plugin-info-")
	if err != nil {
		return SettingsDoc{}, fmt.Errorf("plugin %s: settings schema: %w", plugin, err)
	}
	defer os.RemoveAll(dir)
	host := &pluginhost.Host{Installer: inst, LockPath: filepath.Join(dir, "skippr.lock"), Logger: log}
	cl, bin, err := host.Start(ctx, pluginhost.Connection{Name: "plugin info", Plugin: plugin})
	if err != nil {
		return SettingsDoc{}, classify(ErrStart, fmt.Errorf("plugin %s: settings schema: %w", plugin, err))
	}
	defer cl.Kill()
	sp, err := spec(ctx, cl)
	if err != nil {
		return SettingsDoc{}, fmt.Errorf("plugin %s: settings schema: %w", plugin, err)
	}
	if sp.Name != plugin {
		return SettingsDoc{}, classify(ErrIdentity, fmt.Errorf("plugin %s: the binary says it is %q", plugin, sp.Name))
	}
	version := sp.Version
	if bin.Version != "" {
		version = bin.Version
	}
	return SettingsDoc{Plugin: plugin, Version: version, Schema: json.RawMessage(sp.SettingsSchema)}, nil
}

// schemaNode is the part of a JSON Schema the text form shows.
type schemaNode struct {
	Type        any                    `json:"type"`
	Description string                 `json:"description"`
	Default     json.RawMessage        `json:"default"`
	Enum        []json.RawMessage      `json:"enum"`
	Required    []string               `json:"required"`
	Properties  map[string]*schemaNode `json:"properties"`
	Items       *schemaNode            `json:"items"`
}

// settingRow is one line of the text form.
type settingRow struct {
	path, typ, required, def, desc string
}

// WriteText prints one row per setting (nested objects' settings as parent.child): type, whether it is
// required, its default and its description, then how to get the whole schema. A schema that is not an object
// with properties is printed as it is.
func (d SettingsDoc) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "\nsettings of %s %s (from the plugin's own schema; --json prints it whole):\n", d.Plugin, d.Version)
	var root schemaNode
	if err := json.Unmarshal(d.Schema, &root); err != nil || len(root.Properties) == 0 {
		_, err := fmt.Fprintf(w, "%s\n", d.Schema)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tTYPE\tREQUIRED\tDEFAULT\tDESCRIPTION")
	for _, r := range settingRows("", &root) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.path, r.typ, r.required, r.def, r.desc)
	}
	return tw.Flush()
}

// settingRows flattens n's properties, sorted by name, each object's own properties after it.
func settingRows(prefix string, n *schemaNode) []settingRow {
	names := make([]string, 0, len(n.Properties))
	for k := range n.Properties {
		names = append(names, k)
	}
	slices.Sort(names)
	var out []settingRow
	for _, k := range names {
		p := n.Properties[k]
		if p == nil {
			continue
		}
		r := settingRow{path: prefix + k, typ: typeText(p), required: "-", def: "-", desc: p.Description}
		if slices.Contains(n.Required, k) {
			r.required = "yes"
		}
		if len(p.Default) > 0 {
			r.def = string(p.Default)
		}
		if len(p.Enum) > 0 {
			vals := make([]string, len(p.Enum))
			for i, e := range p.Enum {
				vals[i] = string(e)
			}
			r.typ += " (" + strings.Join(vals, "|") + ")"
		}
		out = append(out, r)
		if len(p.Properties) > 0 {
			out = append(out, settingRows(r.path+".", p)...)
		}
	}
	return out
}

// typeText is a property's type: "string", "integer|string", "array of string"; "-" when the schema says none.
func typeText(n *schemaNode) string {
	var t string
	switch v := n.Type.(type) {
	case string:
		t = v
	case []any:
		parts := make([]string, 0, len(v))
		for _, x := range v {
			parts = append(parts, fmt.Sprint(x))
		}
		t = strings.Join(parts, "|")
	default:
		t = "-"
	}
	if t == "array" && n.Items != nil {
		if it := typeText(n.Items); it != "-" {
			t += " of " + it
		}
	}
	return t
}
