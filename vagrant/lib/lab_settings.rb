# The lab's settings: vagrant/settings.yml, with the file named by GLEANER_LAB_SETTINGS (only
# the keys it changes) merged over it; checked, and turned into the list of machines.
#
# Used by the Vagrantfile, and from the command line by the lab's host-side tools:
#   ruby vagrant/lib/lab_settings.rb [--json] [SETTINGS_FILE]
# prints the resolved settings as JSON, or the problems, one a line, and exits 1.
require "ipaddr"
require "socket"
require "json"
require "yaml"

module LabSettings
  DEFAULTS_FILE = File.expand_path("../settings.yml", __dir__)
  KEYS = %w[box agents name_prefix controller agent libvirt_driver boot_timeout_s storage_pool
            management_network lab_network controller_port agent_port readme_node].freeze
  ROLE_KEYS = { "controller" => %w[cpus memory_mib], "agent" => %w[cpus memory_mib domain_type] }.freeze
  MAX_AGENTS = 40 # node N gets .(10+N) on the lab network
  DRIVERS = %w[auto kvm qemu].freeze
  DOMAIN_TYPES = %w[auto kvm qemu].freeze
  NAME = /\A[a-z][a-z0-9-]{0,30}\z/

  class Error < StandardError; end

  def self.deep_merge(base, over)
    base.merge(over) { |_key, a, b| a.is_a?(Hash) && b.is_a?(Hash) ? deep_merge(a, b) : b }
  end

  def self.read(path)
    data = YAML.safe_load(File.read(path))
    data = {} if data.nil?
    raise Error, "#{path}: the settings must be a mapping of keys to values" unless data.is_a?(Hash)
    data
  rescue Errno::ENOENT, Errno::EACCES => e
    raise Error, "cannot read lab settings #{path}: #{e.message}"
  rescue Psych::Exception => e
    raise Error, "#{path}: not valid YAML: #{e.message}"
  end

  # The defaults with the override file merged over them, checked and resolved.
  def self.load(override = ENV["GLEANER_LAB_SETTINGS"])
    override = nil if override && override.strip.empty?
    data = read(DEFAULTS_FILE)
    source = DEFAULTS_FILE
    if override
      data = deep_merge(data, read(override))
      source = override
    end
    check(data, source)
    resolve(data)
  end

  def self.int_in(errors, where, value, low, high)
    unless value.is_a?(Integer) && value >= low && value <= high
      errors << "#{where} must be a whole number within #{low}..#{high}, not #{value.inspect}"
    end
  end

  def self.check(s, source)
    errors = []
    (s.keys - KEYS).each { |k| errors << "unknown key #{k.inspect}; known: #{KEYS.join(', ')}" }
    (KEYS - s.keys).each { |k| errors << "missing key #{k.inspect}" }
    errors << "box must be a box name, not #{s['box'].inspect}" unless s["box"].is_a?(String) && !s["box"].strip.empty?
    int_in(errors, "agents", s["agents"], 1, MAX_AGENTS)
    unless s["name_prefix"].is_a?(String) && s["name_prefix"] =~ /\A[a-z][a-z0-9-]{0,20}-\z/
      errors << "name_prefix must be lower-case letters, digits and '-', end with '-', at most 22 characters " \
                "(it names every VM, network and volume of the lab), not #{s['name_prefix'].inspect}"
    end
    ROLE_KEYS.each do |role, keys|
      r = s[role]
      unless r.is_a?(Hash)
        errors << "#{role} must be a mapping with #{keys.join(', ')}" if s.key?(role)
        next
      end
      (r.keys - keys).each { |k| errors << "unknown key #{role}.#{k}; known: #{keys.join(', ')}" }
      (keys - r.keys).each { |k| errors << "missing key #{role}.#{k}" }
      int_in(errors, "#{role}.cpus", r["cpus"], 1, 64) if r.key?("cpus")
      int_in(errors, "#{role}.memory_mib", r["memory_mib"], 512, 262_144) if r.key?("memory_mib")
      if r.key?("domain_type") && !DOMAIN_TYPES.include?(r["domain_type"])
        errors << "#{role}.domain_type must be one of #{DOMAIN_TYPES.join(', ')}, not #{r['domain_type'].inspect}"
      end
    end
    unless DRIVERS.include?(s["libvirt_driver"])
      errors << "libvirt_driver must be one of #{DRIVERS.join(', ')}, not #{s['libvirt_driver'].inspect}"
    end
    int_in(errors, "boot_timeout_s", s["boot_timeout_s"], 30, 7200) if s.key?("boot_timeout_s")
    if s.key?("readme_node") && ![true, false].include?(s["readme_node"])
      errors << "readme_node must be true or false, not #{s['readme_node'].inspect}"
    end
    %w[controller_port agent_port].each { |k| int_in(errors, k, s[k], 1024, 65_535) if s.key?(k) }
    check_pool(errors, s["storage_pool"]) if s.key?("storage_pool")
    nets = {}
    { "management_network" => "address", "lab_network" => "subnet" }.each do |key, field|
      next unless s.key?(key)
      n = s[key]
      unless n.is_a?(Hash) && n.keys.sort == ["name", field].sort
        errors << "#{key} must be a mapping with exactly name and #{field}"
        next
      end
      errors << "#{key}.name must match #{NAME.source}, not #{n['name'].inspect}" unless n["name"].is_a?(String) && n["name"] =~ NAME
      begin
        net = IPAddr.new(n[field].to_s)
        prefix = n[field].to_s.split("/")[1].to_i
        if !net.ipv4? || !n[field].to_s.include?("/") || prefix < 16 || prefix > 28
          errors << "#{key}.#{field} must be an IPv4 network in CIDR form, /16 to /28, not #{n[field].inspect}"
        elsif net != IPAddr.new(n[field].to_s.split("/")[0])
          errors << "#{key}.#{field} #{n[field]} has host bits set; did you mean #{net}/#{prefix}?"
        else
          nets[key] = net
        end
      rescue IPAddr::Error
        errors << "#{key}.#{field} must be an IPv4 network in CIDR form, not #{n[field].inspect}"
      end
    end
    mgmt = nets["management_network"]
    if mgmt && mgmt.include?(IPAddr.new("192.168.121.1"))
      errors << "management_network.address must not be vagrant-libvirt's default 192.168.121.0/24 " \
                "(other Vagrant projects on this host use it)"
    end
    if mgmt && nets["lab_network"] && (mgmt.include?(nets["lab_network"]) || nets["lab_network"].include?(mgmt))
      errors << "management_network.address and lab_network.subnet overlap"
    end
    if nets["lab_network"] && s["agents"].is_a?(Integer)
      size = nets["lab_network"].to_range.count
      errors << "lab_network.subnet is too small for #{s['agents']} agents" if 10 + s["agents"] >= size - 1
    end
    if s["management_network"].is_a?(Hash) && s["lab_network"].is_a?(Hash) &&
       s["management_network"]["name"] == s["lab_network"]["name"]
      errors << "management_network.name and lab_network.name must differ"
    end
    return if errors.empty?

    raise Error, "invalid lab settings (#{source} over #{DEFAULTS_FILE}):\n  - " + errors.join("\n  - ")
  end

  def self.check_pool(errors, pool)
    unless pool.is_a?(Hash) && pool.keys.sort == %w[name path]
      errors << "storage_pool must be a mapping with exactly name and path"
      return
    end
    errors << "storage_pool.name must match #{NAME.source}, not #{pool['name'].inspect}" unless pool["name"].is_a?(String) && pool["name"] =~ NAME
    errors << "storage_pool.name must not be libvirt's 'default' pool" if pool["name"] == "default"
    unless pool["path"].is_a?(String) && pool["path"].start_with?("/") && !pool["path"].split("/").include?("..")
      errors << "storage_pool.path must be an absolute path without '..', not #{pool['path'].inspect}"
    end
  end

  def self.host_kvm_usable?
    return false unless File.readable?("/dev/kvm") && File.writable?("/dev/kvm")
    # A host that is itself a VM boots its lab faster under TCG than with nested KVM.
    !File.read("/proc/cpuinfo").match?(/^flags\s*:.*\bhypervisor\b/)
  rescue Errno::ENOENT
    false
  end

  def self.resolve(s)
    lab = IPAddr.new(s["lab_network"]["subnet"])
    ip = ->(n) { IPAddr.new(lab.to_i + n, Socket::AF_INET).to_s }
    driver = s["libvirt_driver"] == "auto" ? (host_kvm_usable? ? "kvm" : "qemu") : s["libvirt_driver"]
    machines = [{ "name" => "controller", "role" => "controller", "ip" => ip.call(10),
                  "cpus" => s["controller"]["cpus"], "memory_mib" => s["controller"]["memory_mib"],
                  "joins" => "provisioning" }]
    (1..s["agents"]).each do |n|
      # the last agent joins by README's "Adding a node" steps (labctl.py add-node), not by provisioning
      joins = s["readme_node"] && n == s["agents"] ? "readme" : "provisioning"
      machines << { "name" => "node#{n}", "role" => "agent", "ip" => ip.call(10 + n),
                    "cpus" => s["agent"]["cpus"], "memory_mib" => s["agent"]["memory_mib"], "joins" => joins }
    end
    machines.each { |m| m["domain"] = "#{s['name_prefix']}#{m['name']}" }
    s.merge("driver" => driver, "machines" => machines, "host_ip" => ip.call(1),
            "controller_address" => "#{machines[0]['ip']}:#{s['controller_port']}")
  end
end

if $PROGRAM_NAME == __FILE__
  args = ARGV.reject { |a| a == "--json" }
  begin
    puts JSON.pretty_generate(LabSettings.load(args[0] || ENV["GLEANER_LAB_SETTINGS"]))
  rescue LabSettings::Error => e
    warn e.message
    exit 1
  end
end
