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
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadKeychain(t *testing.T) {
	k, err := LoadKeychain(writeConfig(t, `{"auths":{"127.0.0.1:5000":{"username":"u","password":"p"}}}`))
	if err != nil || strings.Join(k.Registries(), ",") != "127.0.0.1:5000" {
		t.Errorf("LoadKeychain() = %v, %v; want credentials for 127.0.0.1:5000", k, err)
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
