package dest

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	sf "github.com/snowflakedb/gosnowflake"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// Settings of the destination. Secrets come through ${ENV} references, which the engine interpolates.
type Settings struct {
	Account string `json:"account"`
	User    string `json:"user"`
	// Exactly one way to authenticate: Password, PrivateKey (key-pair, JWT: the usual choice for a service) or
	// Token (an OAuth access token).
	Password   string `json:"password"`
	PrivateKey string `json:"private_key"`
	Token      string `json:"token"`

	Warehouse string `json:"warehouse"`
	Role      string `json:"role"`
	Database  string `json:"database"`
	Schema    string `json:"schema"`

	// Host, Port and Protocol override the account's address (a private link, or the test stand-in).
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`

	// Soft deletes, sync metadata columns and history tables (plugin-sdk/rowmeta; rowmeta.go, history.go),
	// decided per stream with For.
	rowmeta.Settings
}

// DefaultSchema is Snowflake's default schema of a database.
const DefaultSchema = "PUBLIC"

// SettingsSchema is the JSON Schema of Settings.
const SettingsSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "snowflake destination settings",
  "type": "object",
  "additionalProperties": false,
  "required": ["account", "user", "warehouse", "database"],
  "properties": {
    "account": {"type": "string", "minLength": 1, "description": "account identifier (orgname-accountname, or the locator)"},
    "user": {"type": "string", "minLength": 1},
    "password": {"type": "string", "description": "password authentication; use ${ENV}"},
    "private_key": {"type": "string", "description": "key-pair (JWT) authentication: the unencrypted PKCS#8 PEM private key; use ${ENV}"},
    "token": {"type": "string", "description": "OAuth access token; use ${ENV}"},
    "warehouse": {"type": "string", "minLength": 1},
    "role": {"type": "string"},
    "database": {"type": "string", "minLength": 1},
    "schema": {"type": "string", "default": "PUBLIC"},
    "host": {"type": "string", "description": "override the account's host (private link, test stand-in)"},
    "port": {"type": "integer"},
    "protocol": {"type": "string", "enum": ["http", "https"]},
    ` + rowmeta.SchemaProperties + `
  }
}`

// ParseSettings decodes and checks settings.
func ParseSettings(raw json.RawMessage) (Settings, error) {
	var s Settings
	if err := serve.DecodeSettings(raw, &s); err != nil {
		return s, err
	}
	var missing []string
	for _, f := range []struct{ name, v string }{{"account", s.Account}, {"user", s.User}, {"warehouse", s.Warehouse}, {"database", s.Database}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return s, fault.ConfigErr(fmt.Errorf("settings: %s required", strings.Join(missing, ", ")),
			"set "+strings.Join(missing, ", ")+" in the snowflake connection's settings")
	}
	n := 0
	for _, v := range []string{s.Password, s.PrivateKey, s.Token} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return s, fault.ConfigErr(fmt.Errorf("settings: %d of password, private_key, token are set; exactly one is needed", n),
			"set exactly one of password, private_key (key-pair, recommended for services) or token (OAuth), each from ${ENV}")
	}
	if s.Schema == "" {
		s.Schema = DefaultSchema
	}
	// Every stream's overrides are checked now, not when the stream first arrives.
	if err := s.Settings.Check(); err != nil {
		return s, err
	}
	return s, nil
}

// Config is the driver's configuration for s.
func (s Settings) Config() (*sf.Config, error) {
	utc, auto := "UTC", "AUTO"
	cfg := &sf.Config{
		Account: s.Account, User: s.User, Database: s.Database, Schema: s.Schema,
		Warehouse: s.Warehouse, Role: s.Role,
		Host: s.Host, Port: s.Port, Protocol: s.Protocol,
		Application:      "skippr",
		DisableTelemetry: true,
		// Timestamps without a zone are read and written as UTC whatever the account's default; a timestamp
		// constant (_SKIPPR_SYNCED_AT, sfsql.TimestampLiteral) is read by AUTO detection whatever the account's
		// TIMESTAMP_INPUT_FORMAT.
		Params:         map[string]*string{"TIMEZONE": &utc, "TIMESTAMP_INPUT_FORMAT": &auto},
		LoginTimeout:   60 * time.Second,
		RequestTimeout: 0,
	}
	switch {
	case s.Password != "":
		cfg.Authenticator = sf.AuthTypeSnowflake
		cfg.Password = s.Password
	case s.PrivateKey != "":
		key, err := ParsePrivateKey(s.PrivateKey)
		if err != nil {
			return nil, err
		}
		cfg.Authenticator = sf.AuthTypeJwt
		cfg.PrivateKey = key
	case s.Token != "":
		cfg.Authenticator = sf.AuthTypeOAuth
		cfg.Token = s.Token
	}
	return cfg, nil
}

// ParsePrivateKey reads an unencrypted PKCS#8 (or PKCS#1) RSA private key in PEM.
func ParsePrivateKey(p string) (*rsa.PrivateKey, error) {
	fix := "set private_key to the PEM text of the user's unencrypted RSA key (openssl genrsa 2048 | openssl pkcs8 -topk8 -nocrypt), e.g. private_key: ${SNOWFLAKE_PRIVATE_KEY}"
	block, _ := pem.Decode([]byte(p))
	if block == nil {
		return nil, fault.ConfigErr(errors.New("settings: private_key is not PEM"), fix)
	}
	if strings.Contains(block.Type, "ENCRYPTED") {
		return nil, fault.ConfigErr(errors.New("settings: private_key is encrypted"), fix)
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fault.ConfigErr(fmt.Errorf("settings: private_key is a %T; Snowflake key-pair authentication takes RSA", k), fix)
		}
		return rk, nil
	}
	rk, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	if err != nil {
		return nil, fault.ConfigErr(fmt.Errorf("settings: private_key: %w", err), fix)
	}
	return rk, nil
}
