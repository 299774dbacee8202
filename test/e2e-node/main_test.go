//go:build e2e_node

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

package e2enode

import (
	"fmt"
	"os"
	"testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

func TestMain(m *testing.M) {
	if err := nodeframework.Init(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-node:", err)
		os.Exit(1)
	}
	stop, err := startOpenSandbox()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-node:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}
