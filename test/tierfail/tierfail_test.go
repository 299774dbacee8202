//go:build tierfail

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

// Package tierfail is the test that hack/verify-tiers.sh runs in place of
// each tier's own tests (TIER_PKGS=./test/tierfail TIER_TAGS=tierfail) to
// prove that a failing test fails the tier's make target. The build tag keeps
// it out of every other run.
package tierfail

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestTierFail does what $TIERFAIL says:
//
//	(unset or empty)  pass
//	always            fail
//	panic             panic
//	any other value   a regular expression: fail when an environment entry
//	                  (NAME=value) matches it, e.g. '^CONTAINERD_BIN=.' to fail
//	                  only in a tier's run against the built containerd
func TestTierFail(t *testing.T) {
	mode := os.Getenv("TIERFAIL")
	switch mode {
	case "":
		t.Log("tierfail: passing")
		return
	case "always":
		t.Fatal("tierfail: deliberate failure")
	case "panic":
		panic("tierfail: deliberate panic")
	}
	re, err := regexp.Compile(mode)
	if err != nil {
		t.Fatalf("tierfail: TIERFAIL=%q: %v", mode, err)
	}
	for _, kv := range os.Environ() {
		if re.MatchString(kv) && !strings.HasPrefix(kv, "TIERFAIL=") {
			t.Fatalf("tierfail: deliberate failure: %s matches %s", kv, mode)
		}
	}
	t.Logf("tierfail: passing: no environment entry matches %s", mode)
}
