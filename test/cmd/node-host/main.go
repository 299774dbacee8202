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

// Command node-host keeps the books of what test/cluster/node-up.sh changes
// on the host, so that test/cluster/node-down.sh undoes exactly that
// (package nodehost describes the record), and tests both from the outside
// for test/e2e-node.sh. Root only.
//
//	node-host refuse             node-up: fail, changing nothing, when something else holds what the node needs
//	node-host record-start       node-up: record the host before changing it
//	node-host record KIND ARG... node-up: record a change it is about to make (link NAME, chain IPT TABLE NAME)
//	node-host record mkdir DIR   node-up: create DIR and its parents, recording each
//	node-host undo               node-down: undo what the record says, once the daemons are stopped
//	node-host test PHASE         e2e-node: the host test's phases, in this order:
//	                               refusals     node-up refuses, changing nothing, when what it needs is taken
//	                               decoys       lay decoys and record the host
//	                               interrupted  a node-up stopped half-way leaves the host as recorded
//	                               check        after node-down: the decoys are intact and the host as recorded
//
// It finds the clone from its own path (_output/bin/node-host, where
// test/cluster/lib.sh's go_bin builds it); -root names another.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/nodehost"
)

func main() {
	if err := run(); err != nil {
		logf("ERROR: %v", err)
		os.Exit(1)
	}
}

// logf logs as the scripts do (hack/lib.sh's log).
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run() error {
	root := flag.String("root", "", "the clone (default: two folders above this binary's)")
	flag.Parse()
	if *root == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		*root = filepath.Dir(filepath.Dir(filepath.Dir(exe)))
		if _, err := os.Stat(filepath.Join(*root, "test", "cluster", "node-up.sh")); err != nil {
			return fmt.Errorf("%s is not under a clone's _output/bin: pass -root", exe)
		}
	}
	if os.Geteuid() != 0 {
		return errors.New("node-host must run as root")
	}
	n := &nodehost.Node{Root: *root, Logf: logf}
	args := flag.Args()
	if len(args) == 0 {
		return usage()
	}
	switch cmd := args[0]; {
	case cmd == "refuse" && len(args) == 1:
		return n.Refuse()
	case cmd == "record-start" && len(args) == 1:
		return n.RecordStart()
	case cmd == "record" && len(args) == 3 && args[1] == "mkdir":
		return n.RecordMkdir(args[2])
	case cmd == "record" && len(args) > 1:
		c, err := nodehost.ParseChange(strings.Join(args[1:], " "))
		if err != nil {
			return err
		}
		return n.Record(c)
	case cmd == "undo" && len(args) == 1:
		return n.Undo()
	case cmd == "test" && len(args) == 2:
		phases := map[string]func() error{
			"refusals":    n.CheckRefusals,
			"decoys":      n.LayDecoys,
			"interrupted": n.CheckInterrupted,
			"check":       n.CheckRestored,
		}
		if phase, ok := phases[args[1]]; ok {
			return phase()
		}
	}
	return usage()
}

func usage() error {
	return errors.New("usage: node-host [-root DIR] refuse | record-start | record KIND ARG... | record mkdir DIR | undo | test refusals|decoys|interrupted|check")
}
