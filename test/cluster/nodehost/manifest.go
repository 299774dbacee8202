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
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Kind is what sort of change a manifest line records.
type Kind string

// The kinds of change node-up records.
const (
	// KindPath is a path node-up created; its one argument is the path.
	KindPath Kind = "path"
	// KindLink is a network link node-up created; its one argument is the name.
	KindLink Kind = "link"
	// KindChain is an iptables chain node-up created: IPT TABLE NAME.
	KindChain Kind = "chain"
	// KindSysctl is a setting's value before node-up: KEY VALUE.
	KindSysctl Kind = "sysctl"
)

// arity is how many arguments each kind takes.
var arity = map[Kind]int{KindPath: 1, KindLink: 1, KindChain: 3, KindSysctl: 2}

// Change is one change node-up made to the host: a line of the manifest.
type Change struct {
	Kind Kind
	Args []string
}

// String is the change's manifest line.
func (c Change) String() string {
	return strings.Join(append([]string{string(c.Kind)}, c.Args...), " ")
}

// ParseChange reads one manifest line.
func ParseChange(line string) (Change, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return Change{}, errors.New("empty change")
	}
	c := Change{Kind: Kind(f[0]), Args: f[1:]}
	n, ok := arity[c.Kind]
	switch {
	case !ok:
		return Change{}, fmt.Errorf("unknown kind of change %q in %q", f[0], line)
	case len(c.Args) != n:
		return Change{}, fmt.Errorf("%q: a %s change takes %d arguments, not %d", line, c.Kind, n, len(c.Args))
	case c.Kind == KindPath && !filepath.IsAbs(c.Args[0]):
		return Change{}, fmt.Errorf("%q: the path is not absolute", line)
	}
	return c, nil
}

// ParseManifest reads a manifest, in the order node-up made the changes.
func ParseManifest(r io.Reader) ([]Change, error) {
	var changes []Change
	s := bufio.NewScanner(r)
	for line := 1; s.Scan(); line++ {
		c, err := ParseChange(s.Text())
		if err != nil {
			return nil, fmt.Errorf("manifest line %d: %w", line, err)
		}
		changes = append(changes, c)
	}
	return changes, s.Err()
}

// Record appends a change to node-up's manifest, before node-up makes it.
func (n *Node) Record(c Change) error {
	if _, err := ParseChange(c.String()); err != nil {
		return err
	}
	if !exists(n.manifestPath()) {
		return fmt.Errorf("no record of the host in %s: run record-start first", n.recordDir())
	}
	f, err := os.OpenFile(n.manifestPath(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, c); err != nil {
		f.Close()
		return fmt.Errorf("recording %q: %w", c, err)
	}
	return f.Close()
}

// RecordMkdir creates dir and its missing parents, recording each folder
// before it creates it.
func (n *Node) RecordMkdir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%q is not an absolute path", dir)
	}
	var missing []string
	for d := filepath.Clean(dir); !exists(d); d = filepath.Dir(d) {
		missing = append([]string{d}, missing...)
	}
	for _, d := range missing {
		if err := n.Record(Change{Kind: KindPath, Args: []string{d}}); err != nil {
			return err
		}
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}
