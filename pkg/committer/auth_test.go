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

package committer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// username returns the user a keychain signs in to registry as, "" for
// anonymous.
func username(t *testing.T, k authn.Keychain, registry string) string {
	t.Helper()
	r, err := name.NewRegistry(registry)
	if err != nil {
		t.Fatal(err)
	}
	a, err := k.Resolve(r)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := a.Authorization()
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Username
}

func TestLoadKeychain(t *testing.T) {
	k, err := LoadKeychain(writeConfig(t, `{"auths":{"127.0.0.1:5000":{"username":"u","password":"p"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := username(t, k, "127.0.0.1:5000"); got != "u" {
		t.Errorf("user at 127.0.0.1:5000 = %q, want u", got)
	}
	if got := username(t, k, "127.0.0.1:5001"); got != "" {
		t.Errorf("user at 127.0.0.1:5001 = %q, want anonymous", got)
	}
}

func TestKeychainMissingAndInvalid(t *testing.T) {
	for what, dir := range map[string]string{"no directory": "", "no config.json": t.TempDir()} {
		k, err := LoadKeychain(dir)
		if err != nil {
			t.Errorf("%s: %v", what, err)
		} else if got := username(t, k, "127.0.0.1:5000"); got != "" {
			t.Errorf("%s: user %q, want anonymous", what, got)
		}
	}
	secret := "c2VjcmV0LXZhbHVl" // not "user:pass" once decoded
	for _, body := range []string{`{"auths":{"r":{"auth":"` + secret + `"}}}`, `{"auths":{"r":{"auth":"!!` + secret + `"}}}`, `{not json ` + secret} {
		_, err := LoadKeychain(writeConfig(t, body))
		if err == nil {
			t.Errorf("accepted %q", body)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "secret-value") {
			t.Errorf("error leaks the secret: %v", err)
		}
	}
}
