package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	k8stypes "k8s.io/apimachinery/pkg/types"
)

// A DaemonSet deleted and recreated before the shutdown check, whose gap
// the watch never showed, is still told apart from a restart: its uid
// changed. Both keep the files.
func TestCheckNamesAReplacement(t *testing.T) {
	ds := func(uid string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node", Namespace: "istio-cni", UID: k8stypes.UID("ds-" + uid)}}
	}
	client := fake.NewClientset(ds("a"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni", Namespace: "istio-cni"}})
	w := New(Config{Namespace: "istio-cni", DaemonSet: "istio-cni-node", ServiceAccount: "istio-cni"}, client,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	w.saw(daemonSetKind, ds("a")) // as the watch first shows it
	ctx := context.Background()
	uninstall, why, err := w.Check(ctx)
	if err != nil || uninstall || !strings.Contains(why, "is in place") {
		t.Errorf("a restart: %v %q %v", uninstall, why, err)
	}
	if err := client.AppsV1().DaemonSets("istio-cni").Delete(ctx, "istio-cni-node", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AppsV1().DaemonSets("istio-cni").Create(ctx, ds("b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	uninstall, why, err = w.Check(ctx)
	if err != nil || uninstall || !strings.Contains(why, "was replaced (uid ds-b, was ds-a)") {
		t.Errorf("a delete and recreate: %v %q %v", uninstall, why, err)
	}
}
