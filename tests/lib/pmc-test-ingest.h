/* The daemon's two ways of counting a SampleBatch datagram, compared: protobuf-c's unpack
 * counted from its arrays (ingest_batch() without columns), and batch_scan() counted in place
 * (ingest_batch() reading wall_ns and values where they lie, or from the arrays batch_scan()
 * decoded when a varint is too long for that; a batch in fixed form, wall_ns_fixed and
 * values_fixed, read where they lie too). Each way counts into a registry of its own;
 * after each batch every aggregate of the two must be the same: counts, sums, minima, maxima,
 * histograms and scaled events exactly, means and m2 up to rounding. Whatever batch_scan()
 * takes, protobuf-c must take too. A third registry counts the batch in regions alone, no
 * call path node: every region must read the same there, whether it shared its statistics
 * with a node (struct region_agg's via) or not. Shared by tests/unit/test-ingest.c and
 * tests/fuzz/fuzz-ingest.c; the includer defines INGEST_CHECK(expr) (its failure: CHECK()
 * or abort()). */
#pragma once

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/batch.h"
#include "model/ingest.h"
#include "model/registry.h"
#include "model/stats.h"

#ifndef INGEST_CHECK
#error "define INGEST_CHECK(expr) before including pmc-test-ingest.h"
#endif

/* Keys of the compared batches: a sample's region id modulo this. Below CMP_KEYS / 2, key
 * k % 7 == 3 is a region refused (by a limit), an odd key has a call path node too; key
 * k + CMP_KEYS / 2 is k's region too, in no node, in its root node or in a node below key
 * 1's (cmp_init()): a region counted through two nodes, or through one and none, in one batch
 * or in turn. */
#define CMP_KEYS 64u
#define CMP_EVENTS 32u

struct cmp_side {
	struct registry reg;
	struct process *p;
	struct region_agg *region[CMP_KEYS], *node[CMP_KEYS];
	struct stats_budget budget;
	bool plain; /* counted without call path nodes */
};

/* The two ways compared, then the plain registry. */
static struct cmp_side cmp_side[3];
static uint32_t cmp_ev_id[CMP_EVENTS];
static unsigned long cmp_counted, cmp_in_place, cmp_fixed, cmp_taken, cmp_refused;

static struct region_agg *
cmp_resolve(void *ctx, uint32_t key, struct region_agg **node)
{
	struct cmp_side *c = ctx;

	*node = c->plain ? NULL : c->node[key];
	return c->region[key];
}

static void
cmp_init(void)
{
	for (int s = 0; s < 3; s++) {
		struct cmp_side *c = &cmp_side[s];
		char name[32];

		memset(c, 0, sizeof(*c));
		c->budget = (struct stats_budget){.limit = SIZE_MAX, .keep = SIZE_MAX};
		c->plain = s == 2;
		c->p = registry_process(&c->reg, getpid(), getuid());
		INGEST_CHECK(c->p);
		for (uint32_t k = 0; k < CMP_KEYS / 2; k++) {
			if (k % 7 == 3)
				continue;
			snprintf(name, sizeof(name), "r%u", k);
			c->region[k] = registry_process_region(&c->reg, c->p, name);
			INGEST_CHECK(c->region[k]);
			if (k % 2)
				INGEST_CHECK(c->node[k] =
				                     registry_process_path(&c->reg, c->p, 0, name));
		}
		for (uint32_t k = CMP_KEYS / 2; k < CMP_KEYS; k++) {
			uint32_t base = k - CMP_KEYS / 2, how = base / 2 % 3;
			if (!(c->region[k] = c->region[base]) || !how)
				continue;
			snprintf(name, sizeof(name), "r%u", base);
			INGEST_CHECK(c->node[k] = registry_process_path(
			                     &c->reg, c->p, how == 1 ? 0 : c->node[1]->id, name));
		}
		for (uint32_t j = 0; j < CMP_EVENTS; j++) {
			snprintf(name, sizeof(name), "e%u", j);
			int id = registry_process_event_id(c->p, name);
			INGEST_CHECK(id >= 0);
			cmp_ev_id[j] = (uint32_t)id;
		}
	}
}

static inline void
cmp_free(void)
{
	for (int s = 0; s < 3; s++)
		registry_free(&cmp_side[s].reg);
}

/* @a and @b equal up to the rounding of two exact ways of summing (relative 1e-9 of the
 * largest term they come from, @scale). */
static bool
cmp_close(double a, double b, double scale)
{
	return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b) + scale) + 1e-9;
}

static void
cmp_stats(const struct stats *x, const struct stats *y)
{
	INGEST_CHECK(x->count == y->count);
	INGEST_CHECK(x->sum == y->sum);
	INGEST_CHECK(x->min == y->min);
	INGEST_CHECK(x->max == y->max);
	double top = (double)x->max, scale = top * top * (double)x->count;
	INGEST_CHECK(cmp_close(x->mean, y->mean, top));
	INGEST_CHECK(cmp_close(x->m2, y->m2, scale));
	unsigned bx = 0, by = 0, ix, iy;
	uint64_t nx, ny;
	for (;;) {
		bool mx = stats_hist_next(x, &bx, &ix, &nx), my = stats_hist_next(y, &by, &iy, &ny);
		INGEST_CHECK(mx == my);
		if (!mx)
			break;
		INGEST_CHECK(ix == iy && nx == ny);
	}
}

static void
cmp_region(const struct region_agg *x, const struct region_agg *y)
{
	if (!x) {
		INGEST_CHECK(!y);
		return;
	}
	INGEST_CHECK(x->count == y->count);
	cmp_stats(registry_region_wall(x), registry_region_wall(y));
	INGEST_CHECK(x->n_ev == y->n_ev);
	for (size_t e = 0; e < x->n_ev; e++) {
		INGEST_CHECK(x->ev[e].scaled == y->ev[e].scaled);
		INGEST_CHECK(x->ev[e].ratio_sum == y->ev[e].ratio_sum);
		cmp_stats(registry_region_stats(x, e), registry_region_stats(y, e));
	}
}

/* Whether @b is a batch the daemon's session would count (session-batch.c's checks), with
 * *@ne events a sample. */
static bool
cmp_checked(const Pmc__SampleBatch *b, size_t *ne)
{
	size_t n = b->n_region, n_ratio = 0;

	if (b->n_wall_ns != n || (n ? b->n_values % n : b->n_values))
		return false;
	*ne = n ? b->n_values / n : 0;
	if (*ne > CMP_EVENTS || (b->n_scaled && b->n_scaled != n))
		return false;
	for (size_t i = 0; i < b->n_scaled; i++) {
		if (*ne < 32 && b->scaled[i] >> *ne)
			return false;
		n_ratio += (size_t)__builtin_popcount(b->scaled[i]);
	}
	return n_ratio == b->n_scale_ratio;
}

/*
 * Decodes @buf both ways and, when it is a batch the session would count, counts it both
 * ways and compares every aggregate. Return: 1 when it was counted, 0 when not.
 */
static int
cmp_datagram(const uint8_t *buf, size_t len)
{
	static uint32_t keys[BATCH_MAX_SAMPLES];
	Pmc__SampleBatch fast;
	struct batch_cols cols;
	int r = batch_scan(buf, len, &fast, &cols);
	INGEST_CHECK(r == 0 || r == -EAGAIN);
	Pmc__Request *req = pmc__request__unpack(NULL, len, buf);
	if (r < 0) {
		cmp_refused++;
		if (req)
			pmc__request__free_unpacked(req, NULL);
		return 0;
	}
	cmp_taken++;
	/* What the hand decoder takes, protobuf-c takes as the same batch. */
	INGEST_CHECK(req && req->body_case == PMC__REQUEST__BODY_SAMPLE_BATCH);
	const Pmc__SampleBatch *b = req->sample_batch;
	/* A batch in fixed form: its columns as wall_ns and values, as batch_scan() gives them and
	 * the session takes protobuf-c's (sample_batch_cols()); batch_scan() refuses both forms. */
	Pmc__SampleBatch norm;
	if (b->n_wall_ns_fixed || b->n_values_fixed) {
		INGEST_CHECK(!b->n_wall_ns && !b->n_values && (cols.fixed || !cols.in_place));
		norm = *b;
		norm.n_wall_ns = b->n_wall_ns_fixed;
		norm.wall_ns = b->wall_ns_fixed;
		norm.n_values = b->n_values_fixed;
		norm.values = b->values_fixed;
		b = &norm;
	} else {
		INGEST_CHECK(!cols.fixed || (!b->n_wall_ns && !b->n_values));
	}
	INGEST_CHECK(fast.n_region == b->n_region && fast.n_wall_ns == b->n_wall_ns &&
	             fast.n_values == b->n_values && fast.n_scaled == b->n_scaled &&
	             fast.n_scale_ratio == b->n_scale_ratio && fast.tid == b->tid);
	INGEST_CHECK(!fast.n_region || !memcmp(fast.region, b->region, b->n_region * 4));
	INGEST_CHECK(!fast.n_scaled || !memcmp(fast.scaled, b->scaled, b->n_scaled * 4));
	INGEST_CHECK(cols.in_place ? !fast.wall_ns && !fast.values
	                           : (!fast.n_wall_ns ||
	                              !memcmp(fast.wall_ns, b->wall_ns, b->n_wall_ns * 8)) &&
	                                     (!fast.n_values ||
	                                      !memcmp(fast.values, b->values, b->n_values * 8)));
	size_t ne;
	if (!cmp_checked(b, &ne)) {
		pmc__request__free_unpacked(req, NULL);
		return 0;
	}
	/* Spread: a batch's region ids are mostly small. */
	for (size_t i = 0; i < b->n_region; i++)
		keys[i] = b->region[i] * 37u % CMP_KEYS;
	struct ingest g[3] = {
	        {.b = b, .keys = keys, .ev_id = cmp_ev_id, .ne = ne, .resolve = cmp_resolve},
	        {.b = &fast,
	         .cols = cols.in_place ? &cols : NULL,
	         .keys = keys,
	         .ev_id = cmp_ev_id,
	         .ne = ne,
	         .resolve = cmp_resolve},
	};
	g[2] = g[1]; /* the plain registry: as the daemon counts */
	for (int s = 0; s < 3; s++) {
		g[s].ctx = &cmp_side[s];
		g[s].budget = &cmp_side[s].budget;
		INGEST_CHECK(ingest_batch(&g[s]) == 0);
	}
	INGEST_CHECK(g[0].counted == g[1].counted && g[0].refused == g[1].refused);
	INGEST_CHECK(g[0].counted + g[0].refused == b->n_region);
	INGEST_CHECK(g[2].counted == g[0].counted && g[2].refused == g[0].refused);
	for (int reset = 0; reset < 2; reset++) {
		for (uint32_t k = 0; k < CMP_KEYS; k++) {
			cmp_region(cmp_side[0].region[k], cmp_side[1].region[k]);
			cmp_region(cmp_side[0].node[k], cmp_side[1].node[k]);
			cmp_region(cmp_side[0].region[k], cmp_side[2].region[k]);
		}
		/* Now and then every region cleared (each counts from nothing again), or one (the
		 * whole tree with it, the other regions keeping their figures). */
		if (reset || cmp_counted % 4 != 3)
			break;
		for (int s = 0; s < 3; s++)
			(void)registry_reset(&cmp_side[s].reg, 0,
			                     cmp_counted % 8 == 3 ? NULL : "r1");
	}
	cmp_counted++;
	cmp_in_place += cols.in_place;
	cmp_fixed += cols.fixed && cols.in_place;
	pmc__request__free_unpacked(req, NULL);
	return 1;
}
