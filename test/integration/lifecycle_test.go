package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"istio-cni.local/istio-cni/pkg/nodeagent/lifecycle"
	"istio-cni.local/istio-cni/test/cluster"
	"istio-cni.local/istio-cni/test/poll"
)

// agentObjects creates a namespace with the agent's DaemonSet and
// ServiceAccount, and RBAC that lets that ServiceAccount watch the three
// by name, as deployments/ grants it.
func agentObjects(t *testing.T, admin kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	must(admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni"}}, metav1.CreateOptions{}))
	must(admin.AppsV1().DaemonSets(ns).Create(ctx, daemonSet(), metav1.CreateOptions{}))
	watch := []string{"get", "list", "watch"}
	must(admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{ns}, Verbs: watch}}},
		metav1.CreateOptions{}))
	must(admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: ns},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "istio-cni", Namespace: ns}}}, metav1.CreateOptions{}))
	must(admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, ResourceNames: []string{"istio-cni-node"}, Verbs: watch},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, ResourceNames: []string{"istio-cni"}, Verbs: watch},
		}}, metav1.CreateOptions{}))
	must(admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "istio-cni"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "istio-cni", Namespace: ns}}}, metav1.CreateOptions{}))
}

func daemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"app": "istio-cni"}
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "install-cni", Image: "istio-cni:test"}}}}}}
}

// startWatcher runs the uninstall check as the agent's ServiceAccount.
func startWatcher(t *testing.T, admin kubernetes.Interface, ns string, wait time.Duration) (*lifecycle.Watcher, string) {
	t.Helper()
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), "istio-cni", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	w := lifecycle.New(lifecycle.Config{Namespace: ns, DaemonSet: "istio-cni-node", ServiceAccount: "istio-cni", ReplaceWait: wait},
		agentClient(t, token), slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w.Start(ctx)
	// Until the watches (and the authorizer's cache) are in place, a
	// check may not know the DaemonSet yet.
	poll.Until(t, 10*time.Second, "the watcher knows the DaemonSet", func() (bool, string) {
		uninstall, why, err := w.Check(ctx)
		return err == nil && !uninstall, why
	})
	return w, token
}

func wantCheck(t *testing.T, w *lifecycle.Watcher, uninstall bool) string {
	t.Helper()
	got, why, err := w.Check(context.Background())
	if err != nil || got != uninstall {
		t.Fatalf("uninstall = %v (%s), %v; want %v", got, why, err, uninstall)
	}
	return why
}

// TestLifecycleAgainstRealAPI: the uninstall check as the agent's own
// identity, on a real API server, for each way the agent may stop.
func TestLifecycleAgainstRealAPI(t *testing.T) {
	admin := clientFor(t, cluster.AdminToken)
	ctx := context.Background()
	del := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Run("restart", func(t *testing.T) {
		agentObjects(t, admin, "lc-restart")
		w, _ := startWatcher(t, admin, "lc-restart", time.Second)
		t.Log(wantCheck(t, w, false))
	})
	t.Run("daemonset deleted", func(t *testing.T) {
		agentObjects(t, admin, "lc-ds")
		w, _ := startWatcher(t, admin, "lc-ds", time.Second)
		del(admin.AppsV1().DaemonSets("lc-ds").Delete(ctx, "istio-cni-node", metav1.DeleteOptions{}))
		t.Log(wantCheck(t, w, true))
	})
	t.Run("daemonset deleted and recreated", func(t *testing.T) {
		agentObjects(t, admin, "lc-replace")
		w, _ := startWatcher(t, admin, "lc-replace", 10*time.Second)
		del(admin.AppsV1().DaemonSets("lc-replace").Delete(ctx, "istio-cni-node", metav1.DeleteOptions{}))
		go func() {
			time.Sleep(500 * time.Millisecond) // Argo CD's Replace: the create follows the delete
			_, _ = admin.AppsV1().DaemonSets("lc-replace").Create(ctx, daemonSet(), metav1.CreateOptions{})
		}()
		t.Log(wantCheck(t, w, false))
	})
	t.Run("namespace deleted", func(t *testing.T) {
		agentObjects(t, admin, "lc-ns")
		w, _ := startWatcher(t, admin, "lc-ns", time.Second)
		del(admin.CoreV1().Namespaces().Delete(ctx, "lc-ns", metav1.DeleteOptions{}))
		t.Log(wantCheck(t, w, true))
	})
	// kubectl delete -k: the namespace, the ServiceAccount and the RBAC go
	// first, the DaemonSet last, and only then does the agent get SIGTERM.
	// Its watches, authorized before, still tell what happened.
	t.Run("credentials revoked before the daemonset goes", func(t *testing.T) {
		agentObjects(t, admin, "lc-revoked")
		w, token := startWatcher(t, admin, "lc-revoked", time.Second)
		del(admin.CoreV1().ServiceAccounts("lc-revoked").Delete(ctx, "istio-cni", metav1.DeleteOptions{}))
		del(admin.RbacV1().RoleBindings("lc-revoked").Delete(ctx, "istio-cni", metav1.DeleteOptions{}))
		del(admin.RbacV1().ClusterRoleBindings().Delete(ctx, "lc-revoked", metav1.DeleteOptions{}))
		// The API server caches a token's authentication for seconds:
		// wait until the agent's own reads are refused, so the check can
		// only know of the deletion from its watch.
		agent := clientFor(t, token)
		poll.Until(t, 30*time.Second, "the agent's token refused", func() (bool, string) {
			_, err := agent.AppsV1().DaemonSets("lc-revoked").Get(ctx, "istio-cni-node", metav1.GetOptions{})
			return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err), fmt.Sprint(err)
		})
		del(admin.AppsV1().DaemonSets("lc-revoked").Delete(ctx, "istio-cni-node", metav1.DeleteOptions{}))
		poll.Until(t, 20*time.Second, "uninstall once the deletion is seen", func() (bool, string) {
			uninstall, why, err := w.Check(ctx)
			return err == nil && uninstall, why
		})
	})
}
