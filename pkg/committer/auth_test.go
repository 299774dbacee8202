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
	"encoding/base64"
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

func TestKeychain(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("u1:p1:with-colon"))
	dir := writeConfig(t, `{"auths":{
		"127.0.0.1:5000":{"auth":"`+b64+`"},
		"https://index.docker.io/v1/":{"username":"hub","password":"hubpw"},
		"http://reg.example.com/v2/":{"identitytoken":"tok"}}}`)
	k, err := LoadKeychain(dir)
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

func TestKeychainMissingAndInvalid(t *testing.T) {
	if k, err := LoadKeychain(""); err != nil || len(k.Registries()) != 0 {
		t.Errorf("empty dir: %v", err)
	}
	if k, err := LoadKeychain(t.TempDir()); err != nil || len(k.Registries()) != 0 {
		t.Errorf("missing file: %v", err)
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
