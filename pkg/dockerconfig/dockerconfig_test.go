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
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
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

// registryUser returns the user a keychain signs in to registry as, "" for
// anonymous.
func registryUser(t *testing.T, k authn.Keychain, registry string) string {
	t.Helper()
	r, err := name.NewRegistry(registry)
	if err != nil {
		t.Fatal(err)
	}
	return username(t, k, r)
}

// username returns the user a keychain signs in to r as, "" for anonymous.
func username(t *testing.T, k authn.Keychain, r authn.Resource) string {
	t.Helper()
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
	if got := registryUser(t, k, "127.0.0.1:5000"); got != "u" {
		t.Errorf("user at 127.0.0.1:5000 = %q, want u", got)
	}
	if got := registryUser(t, k, "127.0.0.1:5001"); got != "" {
		t.Errorf("user at 127.0.0.1:5001 = %q, want anonymous", got)
	}
}

func TestLoadMissingAndInvalid(t *testing.T) {
	for what, dir := range map[string]string{"no directory": "", "no config.json": t.TempDir()} {
		k, err := Load(dir)
		if err != nil {
			t.Errorf("%s: %v", what, err)
		} else if got := registryUser(t, k, "127.0.0.1:5000"); got != "" {
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

// TestKeychainMatchesAsKubelet checks that a push is signed with the
// credential kubelet would pull the same image with: keys scoped to a
// repository path, host globs and ports match as kubelet matches them, the
// most specific key first. It asks go-containerregistry's authn/kubernetes,
// which keeps kubelet's rules, for the same answers.
func TestKeychainMatchesAsKubelet(t *testing.T) {
	body := []byte(`{"auths":{
		"reg.example.com/team-a":{"username":"a","password":"pa"},
		"reg.example.com/team-b":{"username":"b","password":"pb"},
		"reg.example.com":{"username":"shared","password":"ps"},
		"*.example.org":{"username":"glob","password":"pg"},
		"127.0.0.1:5000":{"username":"port","password":"pp"},
		"https://quay.example.com/v1/":{"username":"v1","password":"pv"}}}`)
	ours, err := Parse(body, "test")
	if err != nil {
		t.Fatal(err)
	}
	kubelets, err := kubernetes.NewFromPullSecrets(context.Background(), []corev1.Secret{{
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: body},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ repo, want string }{
		{"reg.example.com/team-a/sb/app", "a"},
		{"reg.example.com/team-b/sb/app", "b"},
		{"reg.example.com/team-c/sb/app", "shared"},
		{"mirror.example.org/sb/app", "glob"},
		{"a.mirror.example.org/sb/app", ""},
		{"127.0.0.1:5000/sb/app", "port"},
		{"127.0.0.1:5001/sb/app", ""},
		{"quay.example.com/sb/app", "v1"},
	} {
		r, err := name.NewRepository(tc.repo)
		if err != nil {
			t.Fatal(err)
		}
		got, kubelet := username(t, ours, r), username(t, kubelets, r)
		if got != tc.want || kubelet != tc.want {
			t.Errorf("%s: signed in as %q, kubelet as %q; want %q", tc.repo, got, kubelet, tc.want)
		}
	}
}

// TestParseAmbiguousKeys checks that two keys naming one registry path with
// different credentials are refused rather than one taken at random.
func TestParseAmbiguousKeys(t *testing.T) {
	_, err := Parse([]byte(`{"auths":{
		"reg.example.com":{"username":"a","password":"pa"},
		"https://reg.example.com/v1/":{"username":"b","password":"pb"}}}`), "Secret ns/push")
	if err == nil {
		t.Fatal("two credentials for reg.example.com accepted")
	}
	for _, want := range []string{"Secret ns/push", `"reg.example.com"`, `"https://reg.example.com/v1/"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "pa") || strings.Contains(err.Error(), "pb") {
		t.Errorf("error leaks a password: %v", err)
	}
	if _, err := Parse([]byte(`{"auths":{
		"reg.example.com":{"username":"a","password":"pa"},
		"https://reg.example.com/v1/":{"username":"a","password":"pa"}}}`), "test"); err != nil {
		t.Errorf("the same credential under two keys: %v", err)
	}
}

// TestKeychainDockerHub checks Docker Hub as kubelet treats it: its images
// are docker.io/<path>, matched against the keys as any other, and only when
// none matches is the key index.docker.io (docker login's
// https://index.docker.io/v1/) used. authn/kubernetes has no such fallback,
// so the rows say what kubelet's credentialprovider keyring does.
func TestKeychainDockerHub(t *testing.T) {
	for _, tc := range []struct {
		name, auths, repo, want string
	}{
		{"docker login's key", `"https://index.docker.io/v1/":{"username":"login"}`, "library/busybox", "login"},
		{"docker.io before the fallback", `"docker.io":{"username":"hub"},"https://index.docker.io/v1/":{"username":"login"}`, "library/busybox", "hub"},
		{"a path under docker.io", `"docker.io/team-a":{"username":"a"},"docker.io":{"username":"hub"}`, "team-a/app", "a"},
		{"a path under index.docker.io never matches", `"index.docker.io/team-a":{"username":"a"},"https://index.docker.io/v1/":{"username":"login"}`, "team-a/app", "login"},
		{"a glob over docker.io", `"*.io":{"username":"glob"}`, "library/busybox", "glob"},
		{"registry-1.docker.io is another host", `"registry-1.docker.io":{"username":"r1"}`, "library/busybox", ""},
	} {
		k, err := Parse([]byte(`{"auths":{`+tc.auths+`}}`), "test")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r, err := name.NewRepository(tc.repo)
		if err != nil {
			t.Fatal(err)
		}
		if got := username(t, k, r); got != tc.want {
			t.Errorf("%s: %s signed in as %q, want %q", tc.name, tc.repo, got, tc.want)
		}
	}
}
