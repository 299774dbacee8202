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
	"os"
	"path/filepath"
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

// Keychain resolves registry credentials from a docker config.json. Its
// String method and every error it returns are free of secrets.
type Keychain struct {
	auths map[string]authn.AuthConfig
}

// Anonymous returns a keychain without credentials.
func Anonymous() *Keychain {
	return &Keychain{auths: map[string]authn.AuthConfig{}}
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
// Secret).
func Parse(b []byte, source string) (*Keychain, error) {
	k := Anonymous()
	var cfg config
	if err := json.Unmarshal(b, &cfg); err != nil {
		// The JSON decoder may quote input in its message; keep only the kind of error.
		return nil, fmt.Errorf("docker config %s is not valid JSON", source)
	}
	for host, a := range cfg.Auths {
		ac := authn.AuthConfig{
			Username:      a.Username,
			Password:      a.Password,
			IdentityToken: a.IdentityToken,
			RegistryToken: a.RegistryToken,
		}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return nil, fmt.Errorf("docker config %s: auth for %s is not valid base64", source, normalizeRegistryKey(host))
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return nil, fmt.Errorf("docker config %s: auth for %s is not of the form user:password", source, normalizeRegistryKey(host))
			}
			ac.Username, ac.Password = user, pass
		}
		k.auths[normalizeRegistryKey(host)] = ac
	}
	return k, nil
}

// normalizeRegistryKey turns a config.json key ("https://host:port/v1/",
// "host:port") into a bare registry host.
func normalizeRegistryKey(k string) string {
	k = strings.TrimPrefix(k, "https://")
	k = strings.TrimPrefix(k, "http://")
	k, _, _ = strings.Cut(k, "/")
	switch k {
	case "docker.io", "registry-1.docker.io":
		return name.DefaultRegistry
	}
	return k
}

// Resolve implements authn.Keychain.
func (k *Keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if ac, ok := k.auths[normalizeRegistryKey(r.RegistryStr())]; ok {
		return authn.FromConfig(ac), nil
	}
	return authn.Anonymous, nil
}

// String never reveals credentials.
func (k *Keychain) String() string {
	return fmt.Sprintf("docker config keychain for %d registries", len(k.auths))
}
