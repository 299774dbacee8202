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

// Command samples applies config/samples/ to the local cluster and, where no
// kubelet runs, fakes node node-0 and a Running status for pod demo-0
// (package test/cluster/samples says how).
//
//	samples                apply the samples, demo-snap too when its CRD is installed
//	samples --no-snapshot  apply them without demo-snap
//	samples --delete       delete them, and node-0 when it is fake
package main

import (
	"context"
	"os"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/localcluster"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/samples"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		localcluster.Logf("ERROR: %v", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	action, err := samples.Parse(args)
	if err != nil {
		return err
	}
	dirs, err := localcluster.Find()
	if err != nil {
		return err
	}
	ctx := context.Background()
	s, err := samples.New(ctx, dirs)
	if err != nil {
		return err
	}
	if action == samples.DeleteAll {
		return s.Delete(ctx)
	}
	return s.Apply(ctx, action == samples.ApplyAll)
}
