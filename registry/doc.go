// Package registry finds, verifies and installs skippr plugin binaries, and
// publishes them. This comment is the reference for every format it reads
// and writes.
//
// # Registry
//
// A registry is a base URL — file:///abs/dir, http(s)://host/path or
// s3://bucket/prefix[?region=R&endpoint=URL&path_style=true&anonymous=true] —
// serving static files. No login, no server code: any folder, web server or
// bucket holding these files is a registry.
//
//	index.json                                     the index (below)
//	index.json.sig                                 detached signature(s) over index.json
//	<name>/<version>/<os>_<arch>/skippr-plugin-<name>   binaries (the layout Add writes)
//	blobs/sha256/<hex>                             only in mirrors: binaries whose index URL is absolute
//
// # index.json (format 1)
//
//	{
//	  "format": 1,
//	  "plugins": {
//	    "postgres": {
//	      "versions": {
//	        "1.2.3": {
//	          "protocol_versions": [1],
//	          "kind": "source",                      // source | destination | both
//	          "yanked": "corrupts numeric(38,10)",    // absent or "" = not yanked
//	          "platforms": {
//	            "linux_amd64": {"url": "postgres/1.2.3/linux_amd64/skippr-plugin-postgres",
//	                            "sha256": "<64 lowercase hex>", "size": 31457280}
//	          }
//	        }
//	      }
//	    }
//	  }
//	}
//
// Version keys are canonical (go-version String(): "1.2" is written "1.2.0").
// Plugin names match [a-z0-9][a-z0-9_-]{0,63}. A url is relative to the base
// (clean, no "..", no leading "/") or an absolute http(s)/s3/file URL. Unknown
// fields are rejected. Publishing tools write it indented with sorted keys,
// but verification covers the exact bytes, whatever their layout.
//
// # index.json.sig
//
// One line per signer, over the exact bytes of index.json:
//
//	skippr-ed25519-signature <key id> <base64 of the 64-byte ed25519 signature>
//
// Verification succeeds when any line verifies with a key the user trusts for
// that registry; several lines let a registry rotate keys. Lines starting with
// # are comments.
//
// # Keys
//
// A public key file holds one line, "skippr-ed25519-public <base64 of the 32
// key bytes>"; a private key file (mode 0600) holds "skippr-ed25519-private
// <base64 of the 32-byte ed25519 seed>". # comment lines and blank lines are
// allowed around it. A key id is the first 16 hex digits of sha256 of the 32
// public key bytes.
//
// # Trust store: $SKIPPR_HOME/trust.json
//
//	{"format": 1, "registries": [{"url": "https://…", "keys": ["skippr-ed25519-public …"]}]}
//
// Registries are consulted in order; a plugin comes from the first whose index
// lists it. The project's registry (DefaultRegistryURL, BuiltinPublicKey) is
// added by the CLI after the user's entries as a Fallback: it is asked only when
// none of theirs answered. A registry that answers without the plugin but lists
// a close name ends the search with "did you mean".
//
// # Installed plugins: $SKIPPR_HOME/plugins
//
//	plugins/.lock                                  flock held by whoever changes plugins/
//	plugins/<name>/<version>/skippr-plugin-<name>  mode 0755, sha256 = the signed index's
//	plugins/.tmp-*  plugins/.trash-*               in-progress work; swept under the flock
//
// Invariant: a version directory exists only once its binary was downloaded
// in full and matched the size and sha256 of a signed index (and of the lock
// file when one pins it). It is created by renaming a verified temp directory,
// so a crash leaves a temp directory, never a partial version. The binary is
// re-hashed (VerifyFile) before every start.
//
// # skippr.lock (format 1), beside the pipeline config
//
//	{
//	  "format": 1,
//	  "plugins": {
//	    "postgres": {
//	      "version": "1.2.3",
//	      "constraint": "~> 1.2",
//	      "registry": "https://plugins.skippr.dev/v1",
//	      "protocol_versions": [1],
//	      "kind": "source",
//	      "sha256": {"darwin_arm64": "<hex>", "linux_amd64": "<hex>"}
//	    }
//	  }
//	}
//
// sha256 lists every platform the signed index had for the version, so a lock
// made on one platform verifies on another. The file is replaced atomically
// (temp file, fsync, rename, fsync directory).
package registry
