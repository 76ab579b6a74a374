# Thin driver over meson + ninja. See docs/development.md.
#   make deps   install the Debian packages the project needs (idempotent)
#   make        build into build/
#   make test   deps + build + every test suite + the ASan/UBSan unit run; ends with "N passed, N failed"
#   make demo   the most real end-to-end run the code can do today

BUILD      ?= build
ASAN_BUILD ?= build-asan
TKBOX_CC   ?= clang
SUITES     ?= unit fuzz-smoke e2e

# Every Debian package needed to build, run and test. Later work adds to this list only.
DEB_PACKAGES = \
	meson ninja-build pkg-config clang libclang-rt-14-dev clang-format git \
	libjansson-dev libcmocka-dev libssl-dev libyaml-dev libcurl4-openssl-dev zlib1g-dev \
	libsqlite3-dev libseccomp-dev libarchive-dev libzstd-dev \
	qemu-system-x86 e2fsprogs busybox-static cpio lz4 \
	docker-registry skopeo apache2-utils zstd python3 openssl python3-jsonschema mmdebstrap \
	libc-ares-dev nginx-light dnsmasq-base socat curl jq \
	python3-setuptools python3-pytest python3-venv python3-pip \
	python3-yaml \
	tmux \
	nodejs \
	chromium \
	linux-source-6.1 flex bison bc libelf-dev

.PHONY: all deps build test demo clean format format-check asan

all: build

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "make deps: installing:" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else \
		echo "make deps: all $(words $(DEB_PACKAGES)) packages present"; \
	fi

$(BUILD)/build.ninja:
	CC=$(TKBOX_CC) meson setup $(BUILD) --buildtype=release -Db_ndebug=false

$(ASAN_BUILD)/build.ninja:
	CC=$(TKBOX_CC) meson setup $(ASAN_BUILD) --buildtype=debug -Db_sanitize=address,undefined \
		-Db_lundef=false -Dfuzz=false -Dguest=false

build: $(BUILD)/build.ninja
	ninja -C $(BUILD)

asan: $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD)

test: deps
	$(MAKE) build asan
	BUILD=$(BUILD) ASAN_BUILD=$(ASAN_BUILD) SUITES="$(SUITES)" tests/run-all.sh

demo: deps build
	bash tests/demo.sh $(BUILD)

format:
	git ls-files '*.c' '*.h' | xargs clang-format -i

format-check:
	@git ls-files '*.c' '*.h' | xargs clang-format --dry-run --Werror

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
