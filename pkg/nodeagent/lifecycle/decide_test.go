package lifecycle

import "testing"

func TestDecide(t *testing.T) {
	present := object{known: true, uid: "a"}
	gone := object{known: true, gone: true}
	deleting := object{known: true, deleting: true, uid: "a"}
	var unseen object
	for _, tc := range []struct {
		name string
		f    facts
		want verdict
	}{
		{"restart: everything in place", facts{namespace: present, daemonSet: present, serviceAccount: present, readOK: true}, keep},
		{"rolling update, API unreachable now: the watch saw the DaemonSet", facts{namespace: present, daemonSet: present, fresh: unreachable, readOK: true}, keep},
		{"force-deleted pod: token refused, all in place", facts{namespace: present, daemonSet: present, serviceAccount: present, fresh: unauthorized, readOK: true}, keep},
		{"kubectl delete ns", facts{namespace: deleting, daemonSet: present, serviceAccount: present}, remove},
		{"namespace gone", facts{namespace: gone, fresh: unauthorized}, remove},
		{"kubectl delete ds", facts{namespace: present, daemonSet: gone, serviceAccount: present, readOK: true}, awaitReplacement},
		{"foreground delete", facts{namespace: present, daemonSet: deleting, serviceAccount: present, readOK: true}, awaitReplacement},
		{"helm uninstall: the DaemonSet first, rights after", facts{namespace: present, daemonSet: gone, serviceAccount: gone, fresh: forbidden, readOK: true}, awaitServiceAccount},
		{"helm uninstall, the DaemonSet's rights still there", facts{namespace: present, daemonSet: gone, serviceAccount: gone, fresh: answered, readOK: true}, awaitReplacement},
		{"a lapsed watch still shows the DaemonSet; ServiceAccount gone, refused", facts{namespace: present, daemonSet: present, serviceAccount: gone, fresh: unauthorized, readOK: true}, awaitServiceAccount},
		{"nodeSelector changed: the DaemonSet no longer runs here", facts{namespace: present, daemonSet: present, serviceAccount: present, readOK: true, placement: notHere}, remove},
		{"placement unknown (the Node unread)", facts{namespace: present, daemonSet: present, serviceAccount: present, readOK: true, placement: placementUnknown}, keep},
		{"ServiceAccount gone, DaemonSet never seen, refused", facts{namespace: present, daemonSet: unseen, serviceAccount: gone, fresh: unauthorized, readOK: true}, awaitServiceAccount},
		{"refused from the start (misconfigured RBAC)", facts{daemonSet: unseen, serviceAccount: gone, fresh: forbidden}, unknown},
		{"API unreachable, nothing seen", facts{fresh: unreachable}, unknown},
	} {
		if got, why := decide(tc.f, "istio-cni", "istio-cni-node", "istio-cni", "node-a"); got != tc.want {
			t.Errorf("%s: verdict %d (%s), want %d", tc.name, got, why, tc.want)
		}
	}
}
