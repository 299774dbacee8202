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

package nodehost

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Before is the host as node-up found it, for what the daemons change on
// their own. Each field is a file of before/, one line an entry.
type Before struct {
	// Mounts are the mount points.
	Mounts []string
	// Chains are the iptables chains, as Chain.String prints them.
	Chains []string
	// Cgroups are the top-level cgroups of each hierarchy.
	Cgroups []string
	// Paths are the fixed paths that existed.
	Paths []string
	// Entries are the entries of the shared folders.
	Entries []string
}

// files names Before's files in before/.
func (b *Before) files() map[string]*[]string {
	return map[string]*[]string{
		"mounts": &b.Mounts, "chains": &b.Chains, "cgroups": &b.Cgroups, "paths": &b.Paths, "entries": &b.Entries,
	}
}

// captureBefore reads the host.
func captureBefore() (*Before, error) {
	mounts, err := mountPoints()
	if err != nil {
		return nil, err
	}
	chains, _, err := hostRules()
	if err != nil {
		return nil, err
	}
	b := &Before{
		Mounts:  mounts,
		Cgroups: hostCgroups(),
		Paths:   existingPaths(fixedPaths),
		Entries: sharedEntries(),
	}
	for _, c := range chains {
		b.Chains = append(b.Chains, c.String())
	}
	return b, nil
}

// write saves the record in dir.
func (b *Before) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, lines := range b.files() {
		text := strings.Join(*lines, "\n")
		if text != "" {
			text += "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// readBefore loads the record from dir; every file must be there, since
// what a missing one would hold is unknown.
func readBefore(dir string) (*Before, error) {
	b := &Before{}
	for name, lines := range b.files() {
		text, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("the record of the host is incomplete: %w", err)
		}
		*lines = splitLines(string(text))
	}
	return b, nil
}

// RecordStart writes the record of the host before node-up changes it: the
// host in before/, and a manifest holding the sysctls' values.
func (n *Node) RecordStart() error {
	if err := os.RemoveAll(n.recordDir()); err != nil {
		return err
	}
	b, err := captureBefore()
	if err != nil {
		return err
	}
	if err := b.write(n.beforeDir()); err != nil {
		return err
	}
	// The manifest last: with it, the record is complete.
	var text strings.Builder
	for _, k := range sysctls {
		v, err := readSysctl(k)
		if err != nil {
			return err
		}
		fmt.Fprintln(&text, Change{Kind: KindSysctl, Args: []string{k, v}})
	}
	return os.WriteFile(n.manifestPath(), []byte(text.String()), 0o644)
}

// splitLines returns the non-empty lines of text.
func splitLines(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
