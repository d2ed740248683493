package config

import (
	"fmt"
	"strings"
)

// interpolate expands ${VAR} and ${VAR:-default} in s and turns $${ into a literal ${.
// Any other $ is literal. expanded reports whether s held at least one reference, which
// makes the whole value secret. Error messages name variables, never their values.
func interpolate(s string, env func(string) (string, bool)) (out string, expanded bool, err error) {
	if !strings.Contains(s, "${") {
		return s, false, nil
	}
	var b strings.Builder
	var unset []string
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", false, fmt.Errorf(`unterminated "${" (write "$${" for a literal "${")`)
			}
			expr := s[i+2 : i+2+end]
			name, def, hasDef := strings.Cut(expr, ":-")
			if !validVarName(name) {
				return "", false, fmt.Errorf("invalid variable name %q in \"${%s}\" (want letters, digits and _, not starting with a digit)", name, expr)
			}
			expanded = true
			v, ok := lookup(env, name)
			switch {
			case hasDef && (!ok || v == ""):
				b.WriteString(def)
			case ok:
				b.WriteString(v)
			default:
				unset = append(unset, name)
			}
			i += 2 + end + 1
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	switch len(unset) {
	case 0:
		return b.String(), expanded, nil
	case 1:
		return "", false, fmt.Errorf("environment variable %s is not set (give a default with ${%s:-value})", unset[0], unset[0])
	default:
		return "", false, fmt.Errorf("environment variables %s are not set", strings.Join(unset, ", "))
	}
}

func lookup(env func(string) (string, bool), name string) (string, bool) {
	if env == nil {
		return "", false
	}
	return env(name)
}

func validVarName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
