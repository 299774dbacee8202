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

package samples

import "fmt"

// Action is what the samples command does.
type Action int

const (
	// ApplyAll applies the samples with demo-snap.
	ApplyAll Action = iota
	// ApplyNoSnapshot applies the samples without demo-snap.
	ApplyNoSnapshot
	// DeleteAll deletes the samples.
	DeleteAll
)

// Parse parses the samples command line, without the program name.
func Parse(args []string) (Action, error) {
	switch {
	case len(args) == 0:
		return ApplyAll, nil
	case len(args) == 1 && args[0] == "--no-snapshot":
		return ApplyNoSnapshot, nil
	case len(args) == 1 && args[0] == "--delete":
		return DeleteAll, nil
	}
	return 0, fmt.Errorf("usage: samples [--no-snapshot] | --delete")
}
