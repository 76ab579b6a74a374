/* SPDX-License-Identifier: Apache-2.0 */
/* The host side's pure parsers (assets, TSC, QEMU command line). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "banned.h"
#include "strv.h"
#include "crypto.h"
#include "vmm/assets.h"
#include "vmm/vm.h"

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put_le64(uint8_t *p, uint64_t v)
{
	put_le32(p, (uint32_t)v);
	put_le32(p + 4, (uint32_t)(v >> 32));
}

/* A minimal bzImage: 1 setup sector + boot sector, payload at offset 0x100 of the protected-mode part. */
static uint8_t *fake_bzimage(size_t *ret_n, size_t payload_len, bool lz4)
{
	size_t base = 2 * 512, n = base + 0x100 + payload_len;
	uint8_t *p = calloc(1, n);
	assert_non_null(p);
	p[0x1f1] = 1;
	memcpy(p + 0x202, "HdrS", 4);
	put_le16(p + 0x206, 0x20f);
	put_le32(p + 0x248, 0x100);
	put_le32(p + 0x24c, (uint32_t)payload_len);
	if (lz4) {
		memcpy(p + base + 0x100, "\x02\x21\x4c\x18", 4);
	} else {
		memcpy(p + base + 0x100, "\x1f\x8b\x08\x00", 4);
	}
	*ret_n = n;
	return p;
}

static void test_bzimage(void **state)
{
	size_t n, off, len;
	uint8_t *p;
	(void)state;

	p = fake_bzimage(&n, 64, true);
	assert_int_equal(bzimage_lz4_payload(p, n, &off, &len), 0);
	assert_int_equal(off, 2 * 512 + 0x100);
	assert_int_equal(len, 60); /* the 4-byte size trailer is not LZ4 */
	/* Payload length one past the end of the file. */
	put_le32(p + 0x24c, 65);
	assert_int_equal(bzimage_lz4_payload(p, n, &off, &len), -EBADMSG);
	/* Offset beyond the file. */
	put_le32(p + 0x24c, 64);
	put_le32(p + 0x248, 0xffffffff);
	assert_int_equal(bzimage_lz4_payload(p, n, &off, &len), -EBADMSG);
	/* Not a bzImage; old protocol; truncated header. */
	put_le32(p + 0x248, 0x100);
	memcpy(p + 0x202, "HdrX", 4);
	assert_int_equal(bzimage_lz4_payload(p, n, &off, &len), -EBADMSG);
	memcpy(p + 0x202, "HdrS", 4);
	put_le16(p + 0x206, 0x207);
	assert_int_equal(bzimage_lz4_payload(p, n, &off, &len), -EBADMSG);
	assert_int_equal(bzimage_lz4_payload(p, 0x24f, &off, &len), -EBADMSG);
	free(p);
	p = fake_bzimage(&n, 64, false);
	assert_int_equal(bzimage_lz4_payload(p, n, &off, &len), -EPROTONOSUPPORT);
	free(p);
}

/* An ELF64 with a section-name table and a .modinfo section. */
static uint8_t *fake_module(size_t *ret_n, const char *modinfo, size_t modinfo_len)
{
	static const char shstr[] = "\0.shstrtab\0.modinfo\0";
	size_t shoff = 64, n = shoff + 3 * 64 + sizeof(shstr) + modinfo_len;
	uint8_t *p = calloc(1, n);
	uint8_t *sh;
	assert_non_null(p);
	memcpy(p, "\177ELF\2\1\1", 7);
	put_le64(p + 0x28, shoff);
	put_le16(p + 0x3a, 64);
	put_le16(p + 0x3c, 3);
	put_le16(p + 0x3e, 1);
	/* [1] .shstrtab */
	sh = p + shoff + 64;
	put_le32(sh, 1);
	put_le64(sh + 0x18, shoff + 3 * 64);
	put_le64(sh + 0x20, sizeof(shstr));
	memcpy(p + shoff + 3 * 64, shstr, sizeof(shstr));
	/* [2] .modinfo */
	sh = p + shoff + 128;
	put_le32(sh, 11);
	put_le64(sh + 0x18, shoff + 3 * 64 + sizeof(shstr));
	put_le64(sh + 0x20, modinfo_len);
	memcpy(p + shoff + 3 * 64 + sizeof(shstr), modinfo, modinfo_len);
	*ret_n = n;
	return p;
}

static void test_modinfo(void **state)
{
	static const char mi[] = "license=GPL\0depends=virtio,virtio_ring\0intree=Y\0";
	static const char mi_none[] = "license=GPL\0depends=\0";
	static const char mi_absent[] = "license=GPL\0";
	char *d = NULL;
	size_t n;
	uint8_t *p;
	(void)state;

	p = fake_module(&n, mi, sizeof(mi));
	assert_int_equal(modinfo_depends(p, n, &d), 0);
	assert_string_equal(d, "virtio,virtio_ring");
	free(d);
	/* Truncated file: the section runs past the end. */
	assert_int_equal(modinfo_depends(p, n - 1, &d), -EBADMSG);
	/* Section header table past the end. */
	put_le64(p + 0x28, n);
	assert_int_equal(modinfo_depends(p, n, &d), -EBADMSG);
	put_le64(p + 0x28, 64);
	/* shstrndx out of range. */
	put_le16(p + 0x3e, 3);
	assert_int_equal(modinfo_depends(p, n, &d), -EBADMSG);
	free(p);
	p = fake_module(&n, mi_none, sizeof(mi_none));
	assert_int_equal(modinfo_depends(p, n, &d), 0);
	assert_string_equal(d, "");
	free(d);
	free(p);
	p = fake_module(&n, mi_absent, sizeof(mi_absent));
	assert_int_equal(modinfo_depends(p, n, &d), 0);
	assert_string_equal(d, "");
	free(d);
	/* No ELF. */
	memcpy(p, "\177ELX", 4);
	assert_int_equal(modinfo_depends(p, n, &d), -EBADMSG);
	free(p);
}

static void test_apt_depends(void **state)
{
	static const char out[] = "linux-image-cloud-amd64\n  Depends: linux-image-6.1.0-56-cloud-amd64\n";
	static const char bad[] = "linux-image-cloud-amd64\n  Depends: linux-image-6.1.0;rm -rf /\n";
	static const char none[] = "linux-image-cloud-amd64\n";
	char *d = NULL;
	(void)state;

	assert_int_equal(apt_depends_parse(out, strlen(out), &d), 0);
	assert_string_equal(d, "linux-image-6.1.0-56-cloud-amd64");
	free(d);
	assert_int_equal(apt_depends_parse(bad, strlen(bad), &d), -ENOENT);
	assert_int_equal(apt_depends_parse(none, strlen(none), &d), -ENOENT);
	/* A name of 129 bytes is refused, 128 accepted. */
	{
		char buf[256];
		int k = snprintf(buf, sizeof(buf), "  Depends: ");
		memset(buf + k, 'a', 129);
		buf[k + 129] = '\n';
		assert_int_equal(apt_depends_parse(buf, (size_t)k + 130, &d), -ENOENT);
		buf[k + 128] = '\n';
		assert_int_equal(apt_depends_parse(buf, (size_t)k + 129, &d), 0);
		assert_int_equal(strlen(d), 128);
		free(d);
	}
}

static void test_tsc(void **state)
{
	static const char kmsg[] = "<6>[    0.000033] tsc: Detected 2445.406 MHz processor\n"
				   "<6>[    1.2] tsc: Refined TSC clocksource calibration: 2445.399 MHz\n";
	static const char kmsg2[] = "<6>[    0.000033] tsc: Detected 3000 MHz processor\n";
	static const char cpuinfo[] = "processor\t: 0\ncpu MHz\t\t: 2445.406\ncache size\t: 512 KB\n";
	uint64_t khz = 0;
	(void)state;

	assert_int_equal(tsc_khz_from_kmsg(kmsg, strlen(kmsg), &khz), 0);
	assert_int_equal(khz, 2445399);
	assert_int_equal(tsc_khz_from_kmsg(kmsg2, strlen(kmsg2), &khz), 0);
	assert_int_equal(khz, 3000000);
	assert_int_equal(tsc_khz_from_kmsg(cpuinfo, strlen(cpuinfo), &khz), -ENOENT);
	assert_int_equal(tsc_khz_from_cpuinfo(cpuinfo, strlen(cpuinfo), &khz), 0);
	assert_int_equal(khz, 2445406);
	assert_int_equal(tsc_khz_from_cpuinfo("cpu MHz : x\n", 12, &khz), -ENOENT);
	/* Absurd values are refused rather than passed to the guest. */
	assert_int_equal(tsc_khz_from_cpuinfo("cpu MHz : 99999999\n", 19, &khz), -ENOENT);
}

static bool argv_has(char **v, const char *s)
{
	for (; *v; v++) {
		if (strcmp(*v, s) == 0) {
			return true;
		}
	}
	return false;
}

static bool argv_has_substr(char **v, const char *s)
{
	for (; *v; v++) {
		if (strstr(*v, s)) {
			return true;
		}
	}
	return false;
}

static void test_qemu_argv(void **state)
{
	struct vm_config c = { .box_dir = "/tmp/b",
			       .kernel = "/k",
			       .initrd = "/i",
			       .rootfs = "/r.ext4",
			       .scratch = "/s.ext4",
			       .accel = VM_ACCEL_TCG,
			       .tsc_khz = 2445406 };
	char **v = NULL;
	(void)state;

	assert_int_equal(vm_qemu_argv(&c, &v), 0);
	assert_true(argv_has(v, "microvm,acpi=on,pic=off"));
	assert_true(argv_has(v, "-nodefaults"));
	assert_true(argv_has(v, "-no-user-config"));
	assert_true(argv_has(v, "-no-reboot"));
	assert_true(argv_has(v, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"));
	assert_true(argv_has(v, "tcg,tb-size=16"));
	assert_true(argv_has(v, "2048"));
	assert_true(argv_has_substr(v, "tsc_early_khz=2445406"));
	assert_true(argv_has_substr(v, "virtio-blk-device,drive=rootfs,serial=rootfs"));
	assert_true(argv_has_substr(v, "id=rootfs,format=raw,readonly=on"));
	assert_false(argv_has_substr(v, "id=scratch,format=raw,readonly=on"));
	assert_true(argv_has_substr(v, "name=tkbox.agent"));
	assert_true(argv_has_substr(v, "name=tkbox.egress"));
	assert_true(argv_has_substr(v, "name=tkbox.boot"));
	assert_false(argv_has_substr(v, "workspace"));
	/* Never a network device: "-nic none" and nothing that makes one. */
	assert_true(argv_has(v, "none"));
	assert_false(argv_has_substr(v, "netdev"));
	assert_false(argv_has_substr(v, "virtio-net"));
	strv_free(v);
	/* AUTO must be resolved first; limits are checked; QEMU's ',' separator cannot be smuggled in. */
	c.accel = VM_ACCEL_AUTO;
	assert_int_equal(vm_qemu_argv(&c, &v), -EINVAL);
	c.accel = VM_ACCEL_KVM;
	/* KVM keeps QEMU's plain accelerator: tb-size is TCG's alone. */
	assert_int_equal(vm_qemu_argv(&c, &v), 0);
	assert_true(argv_has(v, "kvm"));
	assert_false(argv_has_substr(v, "tb-size"));
	strv_free(v);
	c.vcpus = VM_MAX_VCPUS + 1;
	assert_int_equal(vm_qemu_argv(&c, &v), -ERANGE);
	c.vcpus = VM_MAX_VCPUS;
	c.mem_mib = VM_MAX_MEM_MIB + 1;
	assert_int_equal(vm_qemu_argv(&c, &v), -ERANGE);
	c.mem_mib = 0;
	c.rootfs = "/r.ext4,format=qcow2";
	assert_int_equal(vm_qemu_argv(&c, &v), -EINVAL);
}

/* A kernel directory of the cache: a fake vmlinux with the given content and its manifest (no modules). */
static void fake_kernel_dir(const char *assets, const char *name, const char *content, const char *ptr)
{
	char dir[512], path[600], sha[65], man[800];

	snprintf(dir, sizeof(dir), "%s/%s", assets, name);
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(path, sizeof(path), "%s/vmlinux", dir);
	assert_int_equal(vm_write_file(path, content, strlen(content)), 0);
	assert_int_equal(sha256_hex(content, strlen(content), sha), 0);
	snprintf(man, sizeof(man),
		 "{\"kernel\":\"vmlinux\",\"kernel_sha256\":\"%s\",\"modules\":[],\"package\":\"%s\"}", sha, name);
	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	assert_int_equal(vm_write_file(path, man, strlen(man)), 0);
	if (ptr) {
		assert_int_equal(vm_assets_point(assets, ptr, name), 0);
	}
}

static const char *ensure_version(const char *state, const char *env, int *ret_r)
{
	static char version[64];
	struct vm_assets a = { 0 };

	if (env) {
		setenv(VM_KERNEL_ENV, env, 1);
	} else {
		unsetenv(VM_KERNEL_ENV);
	}
	*ret_r = vm_assets_ensure(state, false, &a);
	snprintf(version, sizeof(version), "%s", *ret_r >= 0 ? a.version : "-");
	if (*ret_r >= 0) {
		assert_int_equal(a.n_modules, 0);
	}
	vm_assets_release(&a);
	return version;
}

/* The built kernel wins when cached and sound; TKBOX_KERNEL forces one; a corrupt built kernel falls back. */
static void test_kernel_choice(void **state)
{
	char tmpl[] = "/tmp/tkbox-assets-XXXXXX", assets[256], path[300];
	int r;

	(void)state;
	assert_non_null(mkdtemp(tmpl));
	snprintf(assets, sizeof(assets), "%s/images", tmpl);
	assert_int_equal(mkdir(assets, 0755), 0);
	snprintf(assets, sizeof(assets), "%s/images/assets", tmpl);
	assert_int_equal(mkdir(assets, 0755), 0);
	fake_kernel_dir(assets, "cloud-k", "cloud kernel", VM_ASSETS_CLOUD_PTR);
	assert_string_equal(ensure_version(tmpl, NULL, &r), "cloud-k");
	assert_string_equal(ensure_version(tmpl, "built", &r), "-");
	assert_int_equal(r, -ENOENT);
	fake_kernel_dir(assets, "built-k", "built kernel", VM_ASSETS_BUILT_PTR);
	assert_string_equal(ensure_version(tmpl, NULL, &r), "built-k");
	assert_string_equal(ensure_version(tmpl, "", &r), "built-k");
	assert_string_equal(ensure_version(tmpl, "built", &r), "built-k");
	assert_string_equal(ensure_version(tmpl, "cloud", &r), "cloud-k");
	assert_string_equal(ensure_version(tmpl, "Built", &r), "-");
	assert_int_equal(r, -EINVAL);
	/* The built vmlinux changed behind the manifest: refused, the cloud kernel stands in unless forced. */
	snprintf(path, sizeof(path), "%s/built-k/vmlinux", assets);
	assert_int_equal(vm_write_file(path, "tampered", 8), 0);
	assert_string_equal(ensure_version(tmpl, NULL, &r), "cloud-k");
	assert_string_equal(ensure_version(tmpl, "built", &r), "-");
	assert_int_equal(r, -EBADMSG);
	/* A pointer naming something outside the cache is refused. */
	assert_int_equal(vm_assets_point(assets, VM_ASSETS_BUILT_PTR, "../x"), 0);
	assert_string_equal(ensure_version(tmpl, "built", &r), "-");
	assert_int_equal(r, -EBADMSG);
	unsetenv(VM_KERNEL_ENV);
	assert_int_equal(vm_rm_rf(tmpl), 0);
}

static void test_accel_parse(void **state)
{
	enum vm_accel a;
	(void)state;
	assert_int_equal(vm_accel_parse("kvm", &a), 0);
	assert_int_equal(a, VM_ACCEL_KVM);
	assert_int_equal(vm_accel_parse("tcg", &a), 0);
	assert_int_equal(vm_accel_parse("auto", &a), 0);
	assert_int_equal(vm_accel_parse("hvf", &a), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bzimage),	      cmocka_unit_test(test_modinfo),
		cmocka_unit_test(test_apt_depends),   cmocka_unit_test(test_tsc),
		cmocka_unit_test(test_qemu_argv),     cmocka_unit_test(test_accel_parse),
		cmocka_unit_test(test_kernel_choice),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
