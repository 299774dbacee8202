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

// Command controller runs the SandboxSnapshot and image deletion reconcilers;
// `controller teardown` releases the snapshots before an uninstall.
package main

import (
	"os"

	filteredinformerfactory "knative.dev/pkg/client/injection/kube/informers/factory/filtered"
	"knative.dev/pkg/injection/sharedmain"
	"knative.dev/pkg/signals"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/imagedeletion"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "teardown" {
		os.Exit(runTeardown(signals.NewContext(), os.Args[2:], os.Stdout, os.Stderr))
	}
	ctx := filteredinformerfactory.WithSelectors(signals.NewContext(), sandboxsnapshot.OpenSandboxJobSelector)
	sharedmain.MainWithContext(ctx, "sandbox-snapshot-controller", sandboxsnapshot.NewController, imagedeletion.NewController)
}
