/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package dockerconfig parses docker config.json credentials, as mounted
// into the commit pods and as held by a kubernetes.io/dockerconfigjson
// Secret, into a go-containerregistry keychain.
package dockerconfig

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// config is the subset of ~/.docker/config.json that is read. Credential
// helpers are not supported: neither the step image nor the controller
// ships any.
type config struct {
	Auths map[string]auth `json:"auths"`
}

type auth struct {
	Auth          string `json:"auth,omitempty"`
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// Keychain resolves registry credentials from a docker config.json the way
// kubelet finds pull credentials, so that an image is pushed with the
// credential its pull will use. Its String method and every error it returns
// are free of secrets.
type Keychain struct {
	// entries are in kubelet's order of trial, reverse lexical by key, so
	// that "reg/team-a" is tried before "reg".
	entries []entry
}

// entry is one credential and the registry key it applies to: a host, which
// may hold globs ("*.example.com") and a port, and an optional path prefix;
// glob is key parsed, raw the config.json key it was read from.
type entry struct {
	key, raw string
	glob     *url.URL
	auth     authn.AuthConfig
}

// Anonymous returns a keychain without credentials.
func Anonymous() *Keychain {
	return &Keychain{}
}

// Load reads <dir>/config.json, the docker config Tekton mounts from the
// push Secret. An empty dir or a missing file gives an anonymous keychain.
func Load(dir string) (*Keychain, error) {
	if dir == "" {
		return Anonymous(), nil
	}
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Anonymous(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading docker config %s: %w", path, err)
	}
	return Parse(b, path)
}

// Parse reads a docker config.json; source names it in errors (a file, a
// Secret). Two keys that name one registry path with different credentials
// are an error: kubelet would pick one of them at random.
func Parse(b []byte, source string) (*Keychain, error) {
	var cfg config
	if err := json.Unmarshal(b, &cfg); err != nil {
		// The JSON decoder may quote input in its message; keep only the kind of error.
		return nil, fmt.Errorf("docker config %s is not valid JSON", source)
	}
	raws := make([]string, 0, len(cfg.Auths))
	for raw := range cfg.Auths {
		raws = append(raws, raw)
	}
	sort.Strings(raws)
	k := &Keychain{}
	seen := map[string]int{} // key -> its index in k.entries
	for _, raw := range raws {
		glob, err := registryKey(raw)
		if err != nil {
			return nil, fmt.Errorf("docker config %s: key %q is not a registry: %w", source, raw, err)
		}
		key := glob.Host + glob.Path
		ac, err := cfg.Auths[raw].config()
		if err != nil {
			return nil, fmt.Errorf("docker config %s: auth for %q %w", source, raw, err)
		}
		if i, ok := seen[key]; ok {
			if first := k.entries[i]; first.auth != ac {
				return nil, fmt.Errorf("docker config %s: keys %q and %q both name %s with different credentials; keep one", source, first.raw, raw, key)
			}
			continue
		}
		seen[key] = len(k.entries)
		k.entries = append(k.entries, entry{key: key, raw: raw, glob: glob, auth: ac})
	}
	sort.Slice(k.entries, func(i, j int) bool { return k.entries[i].key > k.entries[j].key })
	return k, nil
}

// config turns a config.json entry into go-containerregistry's form.
func (a auth) config() (authn.AuthConfig, error) {
	ac := authn.AuthConfig{
		Username:      a.Username,
		Password:      a.Password,
		IdentityToken: a.IdentityToken,
		RegistryToken: a.RegistryToken,
	}
	if a.Auth != "" {
		raw, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil {
			return authn.AuthConfig{}, errors.New("is not valid base64")
		}
		user, pass, ok := strings.Cut(string(raw), ":")
		if !ok {
			return authn.AuthConfig{}, errors.New("is not of the form user:password")
		}
		ac.Username, ac.Password = user, pass
	}
	return ac, nil
}

// registryKey parses a config.json key ("https://host:port/v1/",
// "host/team-a") into the form kubelet indexes: host[:port][/path], without
// a scheme or a /v1/ or /v2/ prefix.
func registryKey(raw string) (*url.URL, error) {
	u, err := parseSchemeless(strings.TrimPrefix(strings.TrimPrefix(raw, "https://"), "http://"))
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(u.Path, "/v1/") || strings.HasPrefix(u.Path, "/v2/") {
		u.Path = u.Path[3:]
	}
	if u.Path == "/" {
		u.Path = ""
	}
	return u, nil
}

// parseSchemeless parses host[:port][/path].
func parseSchemeless(s string) (*url.URL, error) {
	return url.Parse("https://" + s)
}

// Resolve implements authn.Keychain: the first key, in kubelet's order,
// whose host matches (globs per dot-separated part, the same port) and whose
// path is a prefix of the resource's (a plain prefix, as kubelet's:
// "reg/team-a" matches "reg/team-ab" too). Docker Hub's images are matched as
// kubelet names them, docker.io/<path>, and fall back to the key
// index.docker.io (docker login's https://index.docker.io/v1/) when no key
// matches.
func (k *Keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	target := r.String()
	hub := r.RegistryStr() == name.DefaultRegistry
	if hub {
		target = dockerHub + strings.TrimPrefix(target, name.DefaultRegistry)
	}
	u, err := parseSchemeless(target)
	if err != nil {
		return authn.Anonymous, nil
	}
	for _, e := range k.entries {
		if matches(e.glob, u) {
			return authn.FromConfig(e.auth), nil
		}
	}
	if hub {
		for _, e := range k.entries {
			if e.key == name.DefaultRegistry {
				return authn.FromConfig(e.auth), nil
			}
		}
	}
	return authn.Anonymous, nil
}

// dockerHub is the registry name kubelet gives Docker Hub's images.
const dockerHub = "docker.io"

// matches reports whether a key, parsed into glob, applies to target as
// kubelet decides it.
func matches(glob, target *url.URL) bool {
	globParts, globPort := hostParts(glob)
	targetParts, targetPort := hostParts(target)
	if globPort != targetPort || len(globParts) != len(targetParts) || !strings.HasPrefix(target.Path, glob.Path) {
		return false
	}
	for i, p := range globParts {
		if ok, err := filepath.Match(p, targetParts[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

// hostParts splits a URL's host into its dot-separated parts and its port.
func hostParts(u *url.URL) ([]string, string) {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return strings.Split(host, "."), port
}

// String never reveals credentials.
func (k *Keychain) String() string {
	return fmt.Sprintf("docker config keychain for %d registries", len(k.entries))
}
