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

package dockerconfig

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

func TestKeychain(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("u1:p1:with-colon"))
	k, err := Parse([]byte(`{"auths":{
		"127.0.0.1:5000":{"auth":"`+b64+`"},
		"https://index.docker.io/v1/":{"username":"hub","password":"hubpw"},
		"http://reg.example.com/v2/":{"identitytoken":"tok"}}}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		repo string
		want authn.AuthConfig
	}{
		{"127.0.0.1:5000/a", authn.AuthConfig{Username: "u1", Password: "p1:with-colon"}},
		{"docker.io/library/busybox", authn.AuthConfig{Username: "hub", Password: "hubpw"}},
		{"reg.example.com/x", authn.AuthConfig{IdentityToken: "tok"}},
		{"other.example.com/x", authn.AuthConfig{}},
	} {
		r, err := name.NewRepository(tc.repo)
		if err != nil {
			t.Fatal(err)
		}
		a, err := k.Resolve(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		if *got != tc.want {
			t.Errorf("%s: got %+v want %+v", tc.repo, *got, tc.want)
		}
	}
	if s := k.String(); strings.Contains(s, "p1") || strings.Contains(s, "hubpw") {
		t.Errorf("String() leaks: %s", s)
	}
}

func TestParseInvalid(t *testing.T) {
	secret := "c2VjcmV0LXZhbHVl" // not "user:pass" once decoded
	for _, body := range []string{`{"auths":{"r":{"auth":"` + secret + `"}}}`, `{"auths":{"r":{"auth":"!!` + secret + `"}}}`, `{not json ` + secret} {
		_, err := Parse([]byte(body), "Secret ns/push")
		if err == nil {
			t.Errorf("accepted %q", body)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "secret-value") || !strings.Contains(err.Error(), "Secret ns/push") {
			t.Errorf("error leaks the secret or does not name the source: %v", err)
		}
	}
}

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

func TestLoad(t *testing.T) {
	k, err := Load(writeConfig(t, `{"auths":{"127.0.0.1:5000":{"username":"u","password":"p"}}}`))
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

func TestLoadMissingAndInvalid(t *testing.T) {
	for what, dir := range map[string]string{"no directory": "", "no config.json": t.TempDir()} {
		k, err := Load(dir)
		if err != nil {
			t.Errorf("%s: %v", what, err)
		} else if got := username(t, k, "127.0.0.1:5000"); got != "" {
			t.Errorf("%s: user %q, want anonymous", what, got)
		}
	}
	secret := "c2VjcmV0LXZhbHVl" // not "user:pass" once decoded
	for _, body := range []string{`{"auths":{"r":{"auth":"` + secret + `"}}}`, `{"auths":{"r":{"auth":"!!` + secret + `"}}}`, `{not json ` + secret} {
		_, err := Load(writeConfig(t, body))
		if err == nil {
			t.Errorf("accepted %q", body)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "secret-value") {
			t.Errorf("error leaks the secret: %v", err)
		}
	}
}
