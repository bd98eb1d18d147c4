// Starts JMeter 2.13 (Debian 12's `jmeter` package) after opening its XStream to its own classes.
//
// Debian 12 pairs JMeter 2.13 with XStream 1.4.20, whose default security (since 1.4.18) accepts
// only a short list of types, so the packaged `jmeter` command cannot load any test plan
// (ForbiddenClassException: org.apache.jmeter.save.ScriptWrapper). XStream has no switch for
// that outside the code, so this launcher loads JMeter's SaveService, grants its XStream
// instances every type (the plan read is bench/support/open_loop.jmx, written here), and
// hands over to JMeter's own entry point, NewDriver, with the arguments unchanged.
//
//   javac -d DIR -cp "$JMETER_CLASSPATH" JMeterLauncher.java
//   java -Djmeter.home=/usr/share/jmeter -cp "DIR:$JMETER_CLASSPATH" JMeterLauncher -n -t plan.jmx ...
import java.lang.reflect.Field;
import java.lang.reflect.Modifier;

public final class JMeterLauncher {
  private JMeterLauncher() {}

  public static void main(String[] args) throws Exception {
    String home = System.getProperty("jmeter.home", "/usr/share/jmeter");
    // SaveService reads JMeter's properties when its class initializes: load them first.
    Class<?> utils = Class.forName("org.apache.jmeter.util.JMeterUtils");
    utils.getMethod("setJMeterHome", String.class).invoke(null, home);
    utils.getMethod("loadJMeterProperties", String.class).invoke(null, home + "/bin/jmeter.properties");
    Class<?> xstream = Class.forName("com.thoughtworks.xstream.XStream");
    Class<?> permission = Class.forName("com.thoughtworks.xstream.security.TypePermission");
    Object any = Class.forName("com.thoughtworks.xstream.security.AnyTypePermission").getField("ANY").get(null);
    int opened = 0;
    for (Field field : Class.forName("org.apache.jmeter.save.SaveService").getDeclaredFields()) {
      if (Modifier.isStatic(field.getModifiers()) && xstream.isAssignableFrom(field.getType())) {
        field.setAccessible(true);
        xstream.getMethod("addPermission", permission).invoke(field.get(null), any);
        opened++;
      }
    }
    if (opened == 0) {
      throw new IllegalStateException("found no XStream in org.apache.jmeter.save.SaveService: not JMeter 2.13?");
    }
    Class.forName("org.apache.jmeter.NewDriver").getMethod("main", String[].class).invoke(null, (Object) args);
  }
}
