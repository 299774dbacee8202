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

// Package fake registers pkg/podinformer's informer on the fake kube client,
// for tests that set up a fake injection context.
package fake

import (
	"context"

	fakekubeclient "knative.dev/pkg/client/injection/kube/client/fake"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/injection"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/podinformer"
)

func init() {
	injection.Fake.RegisterInformer(func(ctx context.Context) (context.Context, controller.Informer) {
		return podinformer.WithInformer(ctx, fakekubeclient.Get(ctx))
	})
}
