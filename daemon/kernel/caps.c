/* caps: what the daemon holds, decided at start, and CAP_SYS_ADMIN around perf_event_open();
 * see caps.h. libcap (sys/capability.h) for the capability sets; prctl() for no_new_privs. */
#include "kernel/caps.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "kernel/log.h"

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif

enum caps_mode {
	CAPS_ROOT,    /* euid 0: as given */
	CAPS_PERFMON, /* CAP_PERFMON, no CAP_SYS_ADMIN */
	CAPS_RAISE,   /* CAP_SYS_ADMIN permitted only, raised around perf_event_open() */
	CAPS_NONE,    /* neither: the kernel lets it count its own user's threads only */
};

static enum caps_mode mode = CAPS_ROOT;
static int paranoid = 2;
static bool test_paranoid3;
static uint64_t raised;
/* The calling thread's sets with CAP_SYS_ADMIN effective and without (CAPS_RAISE only):
 * made once, so that a raise allocates nothing. */
static cap_t with_admin, without_admin;
static char describe[256] = "root (euid 0): every capability it was started with";

static int
read_paranoid(bool *test)
{
	const char *t = getenv("PMCDAEMON_TEST_PARANOID");
	int v = 2;

	*test = t && *t;
	if (*test)
		return atoi(t);
	FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "re");
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 2;
		fclose(f);
	}
	return v;
}

static bool
has(cap_t c, cap_value_t v, cap_flag_t set)
{
	cap_flag_value_t on = CAP_CLEAR;
	return cap_get_flag(c, v, set, &on) == 0 && on == CAP_SET;
}

/* Clears @v from the sets @sets (of CAP_EFFECTIVE, CAP_PERMITTED, CAP_INHERITABLE) of @c. */
static int
clear(cap_t c, cap_value_t v, const cap_flag_t *sets, int n)
{
	for (int i = 0; i < n; i++)
		if (cap_set_flag(c, sets[i], 1, &v, CAP_CLEAR) < 0)
			return -errno;
	return 0;
}

/* Drops @v from the bounding set when it is there and CAP_SETPCAP is effective in @c. */
static bool
drop_bound(cap_t c, cap_value_t v)
{
	if (CAP_IS_SUPPORTED(v) && cap_get_bound(v) == 1 && has(c, CAP_SETPCAP, CAP_EFFECTIVE))
		return cap_drop_bound(v) == 0;
	return cap_get_bound(v) != 1;
}

static int
setup_unprivileged(void)
{
	static const cap_flag_t eff_inh[] = {CAP_EFFECTIVE, CAP_INHERITABLE};
	static const cap_flag_t all[] = {CAP_EFFECTIVE, CAP_PERMITTED, CAP_INHERITABLE};
	cap_t c = cap_get_proc();
	int r = 0;

	if (!c)
		return -errno;
	bool perfmon = has(c, CAP_PERFMON, CAP_PERMITTED);
	bool admin = has(c, CAP_SYS_ADMIN, CAP_PERMITTED);
	bool need_admin = admin && (paranoid > 2 || !perfmon);

	/* CAP_SETPCAP, if given, is for the bounding set only: raised for that, then gone. */
	if (has(c, CAP_SETPCAP, CAP_PERMITTED)) {
		cap_value_t v = CAP_SETPCAP;
		if (cap_set_flag(c, CAP_EFFECTIVE, 1, &v, CAP_SET) < 0 || cap_set_proc(c) < 0)
			r = -errno;
	}
	bool bound_dropped = need_admin || drop_bound(c, CAP_SYS_ADMIN);
	(void)drop_bound(c, CAP_SETPCAP);
	/* Ambient capabilities must be inheritable and permitted: lowered first. */
	if (CAP_AMBIENT_SUPPORTED()) {
		(void)cap_set_ambient(CAP_SYS_ADMIN, CAP_CLEAR);
		(void)cap_set_ambient(CAP_SETPCAP, CAP_CLEAR);
	}
	if (r == 0)
		r = clear(c, CAP_SETPCAP, all, 3);
	if (r == 0)
		r = need_admin ? clear(c, CAP_SYS_ADMIN, eff_inh, 2)
		               : clear(c, CAP_SYS_ADMIN, all, 3);
	if (r == 0 && cap_set_proc(c) < 0)
		r = -errno;
	/* Nothing it dropped comes back through an exec() (it runs none). */
	if (r == 0 && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		r = -errno;
	if (r == 0 && need_admin) {
		cap_value_t v = CAP_SYS_ADMIN;
		with_admin = cap_dup(c);
		without_admin = cap_dup(c);
		if (!with_admin || !without_admin ||
		    cap_set_flag(with_admin, CAP_EFFECTIVE, 1, &v, CAP_SET) < 0)
			r = -ENOMEM;
	}
	cap_free(c);
	if (r < 0) {
		log_errno(r, "cannot drop the capabilities the daemon does not need");
		return r;
	}

	const char *perf = perfmon ? "CAP_PERFMON" : "no CAP_PERFMON";
	if (need_admin && perfmon) {
		mode = CAPS_RAISE;
		snprintf(describe, sizeof(describe),
		         "%s; CAP_SYS_ADMIN permitted only, raised around perf_event_open "
		         "(perf_event_paranoid %d%s: the kernel asks for CAP_SYS_ADMIN)",
		         perf, paranoid, test_paranoid3 ? ", as the test set it" : "");
	} else if (need_admin) {
		mode = CAPS_RAISE;
		snprintf(describe, sizeof(describe),
		         "%s; CAP_SYS_ADMIN permitted only, raised around perf_event_open (without "
		         "CAP_PERFMON the kernel asks for CAP_SYS_ADMIN; perf_event_paranoid %d)",
		         perf, paranoid);
	} else if (admin) {
		mode = CAPS_PERFMON;
		snprintf(describe, sizeof(describe),
		         "%s; CAP_SYS_ADMIN dropped for good at start%s (perf_event_paranoid %d: "
		         "CAP_PERFMON suffices)",
		         perf, bound_dropped ? "" : " (still in the bounding set: no CAP_SETPCAP)",
		         paranoid);
	} else {
		mode = perfmon ? CAPS_PERFMON : CAPS_NONE;
		snprintf(describe, sizeof(describe), "%s (perf_event_paranoid %d)",
		         perfmon ? "CAP_PERFMON" : "no capability", paranoid);
	}
	return 0;
}

int
caps_setup(void)
{
	bool test;

	paranoid = read_paranoid(&test);
	test_paranoid3 = test && paranoid == 3;
	if (geteuid() == 0) {
		mode = CAPS_ROOT;
		snprintf(describe, sizeof(describe),
		         "root (euid 0): every capability it was started with (perf_event_paranoid "
		         "%d); pmcdaemon.service runs it as a user of its own instead",
		         paranoid);
	} else {
		int r = setup_unprivileged();
		if (r < 0)
			return r;
	}
	log_info("privilege: %s", describe);
	return 0;
}

int
caps_raise(void)
{
	if (mode != CAPS_RAISE)
		return -EPERM;
	if (cap_set_proc(with_admin) < 0)
		return -errno;
	raised++;
	return 0;
}

void
caps_lower(void)
{
	if (cap_set_proc(without_admin) < 0) {
		log_errno(-errno, "cannot lower CAP_SYS_ADMIN after perf_event_open: stopping");
		abort();
	}
}

bool
caps_test_denied(void)
{
	if (!test_paranoid3)
		return false;
	cap_t c = cap_get_proc();
	bool admin = c && has(c, CAP_SYS_ADMIN, CAP_EFFECTIVE);
	cap_free(c);
	return !admin;
}

bool
caps_raises(void)
{
	return mode == CAPS_RAISE;
}

const char *
caps_describe(void)
{
	return describe;
}

uint64_t
caps_effective(void)
{
	cap_t c = cap_get_proc();
	uint64_t eff = 0;

	if (!c)
		return 0;
	for (cap_value_t v = 0; v < 64; v++)
		if (has(c, v, CAP_EFFECTIVE))
			eff |= (uint64_t)1 << v;
	cap_free(c);
	return eff;
}

int
caps_paranoid(void)
{
	return paranoid;
}

uint64_t
caps_raised(void)
{
	return raised;
}
